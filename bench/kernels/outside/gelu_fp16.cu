// Exact (erf) GELU on half-precision activations, written as a PyTorch extension's kernel: a
// grid-stride loop over a capped grid, each element widened to float, erff, and rounded back.
// Scalar 2-byte loads and stores: a quarter of what each memory transaction could carry.
#include <cuda_fp16.h>

/* cuda-agent
[sizes]
n = "1 << 27"      # 256 MiB of float16 in, 256 MiB out

[args]
x = { role = "input",  dtype = "float16", shape = ["n"] }
y = { role = "output", dtype = "float16", shape = ["n"] }
n = { role = "scalar", dtype = "int32", value = "n" }

[launch]
block = [256]
grid = ["min(ceil_div(n, block.x), 65535)"]

[verify]
sizes = [{ n = 1_000_003 }]
oracle = { y = "F.gelu(x.float()).half()" }

[roofline]
flops = "10 * n"
*/
__global__ void gelu_erf_fp16(const half* x, half* y, int n)
{
    for (int i = blockIdx.x * blockDim.x + threadIdx.x; i < n; i += blockDim.x * gridDim.x) {
        float v = __half2float(x[i]);
        float out = 0.5f * v * (1.0f + erff(v * 0.70710678118654752f));
        y[i] = __float2half(out);
    }
}
