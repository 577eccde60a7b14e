// Attention scores in bfloat16 as a first port of a training loop writes them: q and k of shape
// (BH, T, D), one thread per score with the batch-head on blockIdx.z, a pointer to each row, the
// products summed in float and scaled by 1/sqrt(D) on the way out (the scores kept in float).
#include <cuda_bf16.h>

typedef __nv_bfloat16 bf16;

/* cuda-agent
[sizes]
BH = 32
T = 512
D = 128

[args]
scores = { role = "output", dtype = "float32", shape = ["BH", "T", "T"] }
q = { role = "input", dtype = "bfloat16", shape = ["BH", "T", "D"] }
k = { role = "input", dtype = "bfloat16", shape = ["BH", "T", "D"] }
T = { role = "scalar", dtype = "int32", value = "T" }
D = { role = "scalar", dtype = "int32", value = "D" }
scale = { role = "scalar", dtype = "float32", value = "1 / D ** 0.5" }

[launch]
block = [32, 8]
grid = ["ceil_div(T, block.x)", "ceil_div(T, block.y)", "BH"]

[verify]
sizes = [{ BH = 3, T = 77, D = 40 }]
oracle = { scores = "(q.float() @ k.float().transpose(-1, -2)) * scale" }
reduction = "D"
*/
__global__ void scores_bf16(float* scores, const bf16* q, const bf16* k, int T, int D, float scale)
{
    int j = blockIdx.x * blockDim.x + threadIdx.x;  // key
    int i = blockIdx.y * blockDim.y + threadIdx.y;  // query
    int bh = blockIdx.z;
    if (i >= T || j >= T) return;
    const bf16* qi = q + ((size_t)bh * T + i) * D;
    const bf16* kj = k + ((size_t)bh * T + j) * D;
    float dot = 0.0f;
    for (int d = 0; d < D; d++) {
        dot += __bfloat162float(qi[d]) * __bfloat162float(kj[d]);
    }
    scores[((size_t)bh * T + i) * T + j] = dot * scale;
}
