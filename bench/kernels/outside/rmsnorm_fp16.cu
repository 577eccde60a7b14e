// RMSNorm of half-precision rows (a Llama block's), one thread per row: the sum of squares in float,
// then each element scaled and multiplied by the weight, rounded back to half. Each thread walks its
// own 8 KiB row twice with 2-byte loads.
#include <cuda_fp16.h>

/* cuda-agent
[sizes]
rows = 32768
cols = 4096        # 256 MiB of float16 in, 256 MiB out

[args]
out    = { role = "output", dtype = "float16", shape = ["rows", "cols"] }
x      = { role = "input",  dtype = "float16", shape = ["rows", "cols"] }
weight = { role = "input",  dtype = "float16", shape = ["cols"] }
rows = { role = "scalar", dtype = "int32", value = "rows" }
cols = { role = "scalar", dtype = "int32", value = "cols" }
eps  = { role = "scalar", dtype = "float32", value = 1e-6 }

[launch]
block = [128]
grid = ["ceil_div(rows, block.x)"]

[verify]
sizes = [{ rows = 37, cols = 1001 }]
oracle = { out = "(x.float() * torch.rsqrt(x.float().pow(2).mean(dim=-1, keepdim=True) + eps) * weight.float()).half()" }

[roofline]
flops = "4 * rows * cols"
*/
__global__ void rmsnorm_fp16(half* out, const half* x, const half* weight, int rows, int cols, float eps)
{
    int row = blockIdx.x * blockDim.x + threadIdx.x;
    if (row >= rows) return;

    const half* x_row = x + (size_t)row * cols;
    half* out_row = out + (size_t)row * cols;

    float ss = 0.0f;
    for (int i = 0; i < cols; i++) {
        float v = __half2float(x_row[i]);
        ss += v * v;
    }
    float scale = rsqrtf(ss / cols + eps);

    for (int i = 0; i < cols; i++) {
        out_row[i] = __float2half(__half2float(x_row[i]) * scale * __half2float(weight[i]));
    }
}
