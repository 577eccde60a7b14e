// A GPT-2 linear layer's forward pass in half precision, as the first CUDA port of a training loop
// writes it: out = inp @ weight^T + bias over (B*T, C) x (OC, C), one thread per output on 2-D blocks,
// both operands read along C (a warp reads 32 rows of the weight, each with a 2-byte load), the sum in
// float and rounded back to half with the bias.
#include <cuda_fp16.h>

/* cuda-agent
[sizes]
BT = 4096
C = 768
OC = 3072          # the MLP's first layer: 19.3 GFLOP

[args]
out    = { role = "output", dtype = "float16", shape = ["BT", "OC"] }
inp    = { role = "input",  dtype = "float16", shape = ["BT", "C"] }
weight = { role = "input",  dtype = "float16", shape = ["OC", "C"] }
bias   = { role = "input",  dtype = "float16", shape = ["OC"] }
BT = { role = "scalar", dtype = "int32", value = "BT" }
C  = { role = "scalar", dtype = "int32", value = "C" }
OC = { role = "scalar", dtype = "int32", value = "OC" }

[launch]
block = [32, 8]
grid = ["ceil_div(OC, block.x)", "ceil_div(BT, block.y)"]

[verify]
sizes = [{ BT = 77, C = 100, OC = 129 }]
oracle = { out = "F.linear(inp, weight, bias)" }
reduction = "C"

[roofline]
flops = "2 * BT * C * OC"
*/
__global__ void linear_forward_fp16(half* out, const half* inp, const half* weight, const half* bias,
                                    int BT, int C, int OC)
{
    int oc = blockIdx.x * blockDim.x + threadIdx.x;
    int bt = blockIdx.y * blockDim.y + threadIdx.y;
    if (bt < BT && oc < OC) {
        const half* x = inp + (size_t)bt * C;
        const half* w = weight + (size_t)oc * C;
        float val = __half2float(bias[oc]);
        for (int i = 0; i < C; i++) {
            val += __half2float(x[i]) * __half2float(w[i]);
        }
        out[(size_t)bt * OC + oc] = __float2half(val);
    }
}
