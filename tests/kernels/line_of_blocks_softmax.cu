// A thread per row as first drafts write it: the block number made one line of a 2-D grid, the loop
// variable declared before its loops, each row value held in a local read from memory.
__global__ void row_softmax(int cols, int rows, float* in, float scale, float* out)
{
    int r = (blockIdx.x + blockIdx.y * gridDim.x) * blockDim.x + threadIdx.x;
    if (r >= rows) return;
    int k;
    float top = -INFINITY, total = 0;
    for (k = 0; k < cols; ++k) {
        int v = in[k + r * cols];
        top = (v > top) ? v : top;
    }
    for (k = 0; k < cols; ++k) total += exp(in[k + r * cols] / scale - top / scale);
    for (k = 0; k < cols; ++k) out[k + r * cols] = exp(in[k + r * cols] / scale - top) / total;
}
