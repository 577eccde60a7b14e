// A row softmax as course code writes it: one block per row, each pass strided over the block's
// threads, the block's maximum and sum combined through a shared array with a tree of barriers.

/* cuda-agent
[sizes]
rows = 16384
cols = 4096

[args]
out  = { role = "output", dtype = "float32", shape = ["rows", "cols"] }
input = { role = "input",  dtype = "float32", shape = ["rows", "cols"] }
rows = { role = "scalar", dtype = "int32", value = "rows" }
cols = { role = "scalar", dtype = "int32", value = "cols" }

[launch]
block = [256]
grid = ["rows"]

[verify]
sizes = [{ rows = 5, cols = 1001 }]
oracle = { out = "torch.softmax(input, dim=-1)" }
reduction = "cols"
*/
__global__ void softmax_rows(float* out, const float* input, int rows, int cols)
{
    __shared__ float partial[256];
    int row = blockIdx.x;
    int tid = threadIdx.x;
    if (row >= rows) return;
    const float* x = input + (size_t)row * cols;

    float local_max = -3.402823466e38f;
    for (int c = tid; c < cols; c += blockDim.x)
        local_max = fmaxf(local_max, x[c]);
    partial[tid] = local_max;
    __syncthreads();
    for (int stride = blockDim.x / 2; stride > 0; stride >>= 1) {
        if (tid < stride) partial[tid] = fmaxf(partial[tid], partial[tid + stride]);
        __syncthreads();
    }
    float row_max = partial[0];
    __syncthreads();

    float local_sum = 0.0f;
    for (int c = tid; c < cols; c += blockDim.x)
        local_sum += __expf(x[c] - row_max);
    partial[tid] = local_sum;
    __syncthreads();
    for (int stride = blockDim.x / 2; stride > 0; stride >>= 1) {
        if (tid < stride) partial[tid] += partial[tid + stride];
        __syncthreads();
    }
    float inv_sum = 1.0f / partial[0];

    for (int c = tid; c < cols; c += blockDim.x)
        out[(size_t)row * cols + c] = __expf(x[c] - row_max) * inv_sum;
}
