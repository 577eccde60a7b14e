// A row softmax a block per row, as a first CUDA course hands it in: each thread strides over the row
// for its own maximum and sum, then two shared-memory trees with sequential addressing combine the
// threads' values, the maximum by fmaxf. The trees leave the row's values in slot 0.

/* cuda-agent
[sizes]
rows = 4096
cols = 2048

[args]
out = { role = "output", dtype = "float32", shape = ["rows", "cols"] }
input = { role = "input",  dtype = "float32", shape = ["rows", "cols"] }
rows = { role = "scalar", dtype = "int32", value = "rows" }
cols = { role = "scalar", dtype = "int32", value = "cols" }

[launch]
block = [256]
grid = ["rows"]

[verify]
sizes = [{ rows = 37, cols = 1001 }]
oracle = { out = "torch.softmax(input, dim=1)" }
reduction = "cols"
*/
#define THREADS 256

__global__ void softmax_rows(float* out, const float* input, int rows, int cols)
{
    __shared__ float cache[THREADS];
    int row = blockIdx.x;
    int t = threadIdx.x;
    const float* x = input + row * cols;

    float m = -INFINITY;
    for (int c = t; c < cols; c += blockDim.x) m = fmaxf(m, x[c]);
    cache[t] = m;
    __syncthreads();
    for (int stride = blockDim.x / 2; stride > 0; stride >>= 1) {
        if (t < stride) cache[t] = fmaxf(cache[t], cache[t + stride]);
        __syncthreads();
    }
    float row_max = cache[0];
    __syncthreads();

    float s = 0.0f;
    for (int c = t; c < cols; c += blockDim.x) s += expf(x[c] - row_max);
    cache[t] = s;
    __syncthreads();
    for (int stride = blockDim.x / 2; stride > 0; stride >>= 1) {
        if (t < stride) cache[t] += cache[t + stride];
        __syncthreads();
    }
    float row_sum = cache[0];

    for (int c = t; c < cols; c += blockDim.x) out[row * cols + c] = expf(x[c] - row_max) / row_sum;
}
