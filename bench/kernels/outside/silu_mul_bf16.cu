// SwiGLU's activation in bfloat16 as LLM serving code writes it: one block per token, its threads
// striding over the hidden size, out = silu(gate) * up with gate and up the two halves of the row.
// Scalar 2-byte loads, __expf, and a block of 256 threads for each of 8192 rows of 11008.
#include <cuda_bf16.h>

/* cuda-agent
[sizes]
tokens = 8192
d = 11008          # Llama's MLP width: 344 MiB of bfloat16 in, 172 MiB out

[args]
out    = { role = "output", dtype = "bfloat16", shape = ["tokens", "d"] }
input  = { role = "input",  dtype = "bfloat16", shape = ["tokens", "2 * d"] }
d      = { role = "scalar", dtype = "int32", value = "d" }

[launch]
block = [256]
grid = ["tokens"]

[verify]
sizes = [{ tokens = 7, d = 1001 }]
oracle = { out = "(F.silu(input[:, :d].float()) * input[:, d:].float()).bfloat16()" }

[roofline]
flops = "6 * tokens * d"
*/
__device__ __forceinline__ float silu(float x)
{
    return x / (1.0f + __expf(-x));
}

__global__ void silu_and_mul_bf16(__nv_bfloat16* out, const __nv_bfloat16* input, int d)
{
    const int token = blockIdx.x;
    const __nv_bfloat16* gate = input + (size_t)token * 2 * d;
    const __nv_bfloat16* up = gate + d;
    for (int i = threadIdx.x; i < d; i += blockDim.x) {
        float g = __bfloat162float(gate[i]);
        float u = __bfloat162float(up[i]);
        out[(size_t)token * d + i] = __float2bfloat16(silu(g) * u);
    }
}
