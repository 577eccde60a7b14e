// GELU's backward pass (the tanh approximation) in bfloat16, as a mixed-precision training loop's first
// port writes it: one thread per element, every value widened to float, the derivative written out
// term by term.
#include <cuda_bf16.h>

#define GELU_SCALING_FACTOR 0.7978845608f  // sqrt(2 / pi)

/* cuda-agent
[sizes]
N = 33554432       # 64 MiB for each of x, dout and dinp

[args]
dinp = { role = "output", dtype = "bfloat16", shape = ["N"] }
inp  = { role = "input",  dtype = "bfloat16", shape = ["N"] }
dout = { role = "input",  dtype = "bfloat16", shape = ["N"] }
N = { role = "scalar", dtype = "int32", value = "N" }

[launch]
block = [256]
grid = ["ceil_div(N, block.x)"]

[verify]
sizes = [{ N = 100003 }]
oracle = { dinp = "(dout.float() * (0.5 * (1 + torch.tanh(0.7978845608 * (inp.float() + 0.044715 * inp.float() ** 3))) + 0.5 * inp.float() * (1 - torch.tanh(0.7978845608 * (inp.float() + 0.044715 * inp.float() ** 3)) ** 2) * 0.7978845608 * (1 + 3 * 0.044715 * inp.float() ** 2))).bfloat16()" }

[roofline]
flops = "20 * N"
*/
__global__ void gelu_backward(__nv_bfloat16* dinp, const __nv_bfloat16* inp, const __nv_bfloat16* dout, int N)
{
    int i = blockIdx.x * blockDim.x + threadIdx.x;
    if (i < N) {
        float x = __bfloat162float(inp[i]);
        float cube = 0.044715f * x * x * x;
        float tanh_arg = GELU_SCALING_FACTOR * (x + cube);
        float tanh_out = tanhf(tanh_arg);
        float coshf_out = coshf(tanh_arg);
        float sech_out = 1.0f / (coshf_out * coshf_out);
        float local_grad = 0.5f * (1.0f + tanh_out) + x * 0.5f * sech_out * GELU_SCALING_FACTOR * (1.0f + 3.0f * 0.044715f * x * x);
        dinp[i] = __float2bfloat16(local_grad * __bfloat162float(dout[i]));
    }
}
