// Row-wise softmax, one thread per row: each thread walks its own row three times, so neighbouring
// threads read addresses `cols` apart (no coalescing).

/* cuda-agent
[sizes]
rows = 65536
cols = 1024    # 256 MiB in, 256 MiB out

[args]
x    = { role = "input",  dtype = "float32", shape = ["rows", "cols"] }
y    = { role = "output", dtype = "float32", shape = ["rows", "cols"] }
rows = { role = "scalar", dtype = "int32", value = "rows" }
cols = { role = "scalar", dtype = "int32", value = "cols" }

[launch]
block = [128]
grid = ["ceil_div(rows, block.x)"]

[verify]
sizes = [{ rows = 333, cols = 999 }]
oracle = { y = "torch.softmax(x, dim=-1)" }
tolerance = { atol = 1e-6, rtol = 1e-4 }

[roofline]
flops = "5 * rows * cols"
*/
__global__ void softmax_rows(const float* x, float* y, int rows, int cols)
{
    int row = blockIdx.x * blockDim.x + threadIdx.x;
    if (row >= rows) return;
    const float* in = x + (size_t)row * cols;
    float* out = y + (size_t)row * cols;

    float peak = -3.402823466e+38f;  // -FLT_MAX, without <cfloat>
    for (int c = 0; c < cols; ++c) peak = fmaxf(peak, in[c]);

    float total = 0.0f;
    for (int c = 0; c < cols; ++c) total += expf(in[c] - peak);

    for (int c = 0; c < cols; ++c) out[c] = expf(in[c] - peak) / total;
}
