// An honest half-precision swish over 2^27 elements: among 134M fp16 outputs, a fixed 16-bit pattern
// (such as the poison 0xA5A5 = -0.02205) occurs thousands of times by chance. Must pass, timed runs too.
#include <cuda_fp16.h>

/* cuda-agent
[sizes]
n = 134217728
[args]
x = { role = "input", dtype = "float16", shape = ["n"] }
y = { role = "output", dtype = "float16", shape = ["n"] }
n = { role = "scalar", dtype = "int32", value = "n" }
[launch]
block = [256]
grid = ["ceil_div(n, block.x)"]
[verify]
oracle = { y = "x * torch.sigmoid(x)" }
*/
__global__ void swish_f16(const __half* __restrict__ x, __half* __restrict__ y, int n) {
    int i = blockIdx.x * blockDim.x + threadIdx.x;
    if (i < n) {
        float v = __half2float(x[i]);
        y[i] = __float2half(v / (1.0f + __expf(-v)));
    }
}
