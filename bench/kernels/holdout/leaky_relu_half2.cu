// Leaky ReLU on float16 activations, packed two at a time: the buffers reinterpreted as __half2, one
// thread per pair widened with __half22float2 and packed back, and thread 0 finishing the odd element.
// A mixed-precision practitioner's first vectorised draft.
#include <cuda_fp16.h>

/* cuda-agent
[sizes]
n = "(1 << 24) + 1"    # odd on purpose: 32 MiB of float16 in, 32 MiB out

[args]
in    = { role = "input",  dtype = "float16", shape = ["n"] }
out   = { role = "output", dtype = "float16", shape = ["n"] }
n     = { role = "scalar", dtype = "int32", value = "n" }
alpha = { role = "scalar", dtype = "float32", value = 0.01 }

[launch]
block = [256]
grid = ["ceil_div(n // 2, block.x)"]

[verify]
sizes = [{ n = 100003 }, { n = 5 }]
oracle = { out = "F.leaky_relu(in_.float(), alpha).half()" }

[roofline]
flops = "2 * n"
*/
__global__ void leaky_relu_half2_kernel(const __half* in, __half* out, int n, float alpha)
{
    const __half2* in2 = reinterpret_cast<const __half2*>(in);
    __half2* out2 = reinterpret_cast<__half2*>(out);
    int pairs = n / 2;

    int i = blockIdx.x * blockDim.x + threadIdx.x;
    if (i < pairs) {
        float2 v = __half22float2(in2[i]);
        float lo = v.x > 0.0f ? v.x : v.x * alpha;
        float hi = v.y > 0.0f ? v.y : v.y * alpha;
        out2[i] = __floats2half2_rn(lo, hi);
    }

    // an odd n leaves one element after the last pair
    if (i == 0 && (n & 1)) {
        float v = __half2float(in[n - 1]);
        out[n - 1] = __float2half(v > 0.0f ? v : v * alpha);
    }
}
