// Layer norm over the last dimension, one thread per row: mean, then variance, then the output,
// each a serial walk over the row.

/* cuda-agent
[sizes]
rows = 65536
cols = 1024    # 256 MiB in, 256 MiB out

[args]
x     = { role = "input",  dtype = "float32", shape = ["rows", "cols"] }
gamma = { role = "input",  dtype = "float32", shape = ["cols"] }
beta  = { role = "input",  dtype = "float32", shape = ["cols"] }
y     = { role = "output", dtype = "float32", shape = ["rows", "cols"] }
rows  = { role = "scalar", dtype = "int32", value = "rows" }
cols  = { role = "scalar", dtype = "int32", value = "cols" }

[launch]
block = [128]
grid = ["ceil_div(rows, block.x)"]

[verify]
sizes = [{ rows = 333, cols = 999 }]
oracle = { y = "F.layer_norm(x, (cols,), gamma, beta, 1e-5)" }
reduction = "cols"

[roofline]
flops = "8 * rows * cols"
*/
__global__ void layernorm_rows(
    const float* x, const float* gamma, const float* beta, float* y, int rows, int cols)
{
    int row = blockIdx.x * blockDim.x + threadIdx.x;
    if (row >= rows) return;
    const float* in = x + (size_t)row * cols;
    float* out = y + (size_t)row * cols;

    float mean = 0.0f;
    for (int c = 0; c < cols; ++c) mean += in[c];
    mean /= cols;

    float var = 0.0f;
    for (int c = 0; c < cols; ++c) {
        float d = in[c] - mean;
        var += d * d;
    }
    var /= cols;

    float inv_std = rsqrtf(var + 1e-5f);
    for (int c = 0; c < cols; ++c) out[c] = (in[c] - mean) * inv_std * gamma[c] + beta[c];
}
