// A thread per row as first drafts write it: the block number made one line of a 2-D grid, the loop
// variable declared before its loops, each value held in a local read from memory. Each row is scaled
// by its largest magnitude and then to unit length.
__global__ void row_unit_norm(int cols, int rows, float* in, float floor_value, float* out)
{
    int r = (blockIdx.x + blockIdx.y * gridDim.x) * blockDim.x + threadIdx.x;
    if (r >= rows) return;
    int k;
    float peak = floor_value, squares = 0;
    for (k = 0; k < cols; ++k) {
        float magnitude = fabsf(in[r * cols + k]);
        peak = (magnitude > peak) ? magnitude : peak;
    }
    for (k = 0; k < cols; ++k) squares += (in[r * cols + k] / peak) * (in[r * cols + k] / peak);
    for (k = 0; k < cols; ++k) out[r * cols + k] = in[r * cols + k] / (peak * sqrtf(squares));
}
