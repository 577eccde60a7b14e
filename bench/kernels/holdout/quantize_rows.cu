// Symmetric int8 quantisation of a weight matrix, one scale per row, as a quantisation library's
// reference kernel writes it: one thread per row finds the row's largest magnitude, then rounds every
// element of the row against it.

/* cuda-agent
[sizes]
rows = 16384
cols = 4096        # 256 MiB of float32 in, 64 MiB of int8 out

[args]
q     = { role = "output", dtype = "int8",    shape = ["rows", "cols"] }
scale = { role = "output", dtype = "float32", shape = ["rows"] }
x     = { role = "input",  dtype = "float32", shape = ["rows", "cols"] }
rows = { role = "scalar", dtype = "int32", value = "rows" }
cols = { role = "scalar", dtype = "int32", value = "cols" }

[launch]
block = [128]
grid = ["ceil_div(rows, block.x)"]

[verify]
sizes = [{ rows = 77, cols = 301 }]
oracle = { scale = "x.abs().amax(1) / 127", q = "torch.round(x / (x.abs().amax(1, keepdim=True) / 127)).to(torch.int8)" }
tolerance = { q = { atol = 1, rtol = 0 } }   # x * (1 / s) and x / s can round to neighbouring integers

[roofline]
flops = "3 * rows * cols"
*/
__global__ void quantize_per_row(signed char* q, float* scale, const float* x, int rows, int cols)
{
    int r = blockIdx.x * blockDim.x + threadIdx.x;
    if (r >= rows) return;

    float amax = 0.0f;
    for (int c = 0; c < cols; ++c) {
        amax = fmaxf(amax, fabsf(x[r * cols + c]));
    }
    float s = amax / 127.0f;
    scale[r] = s;
    float inv = s > 0.0f ? 1.0f / s : 0.0f;
    for (int c = 0; c < cols; ++c) {
        q[r * cols + c] = (signed char)__float2int_rn(x[r * cols + c] * inv);
    }
}
