// Causal attention scores as the first CUDA port of a GPT-2 attention layer writes them: one thread per
// (batch, head, query, key) score, the 64-long dot product read straight from the packed (B, T, 3C)
// QKV buffer. Neighbouring threads read keys 3C floats apart (no coalescing), every query row is read
// again for each of its keys, and the threads above the diagonal only store -INFINITY.

/* cuda-agent
[sizes]
B = 4
NH = 8
T = 1024
hs = 64
C = "NH * hs"      # 24 MiB of QKV in, 128 MiB of scores out (B * NH = 32 heads)

[args]
preatt = { role = "output", dtype = "float32", shape = ["B", "NH", "T", "T"] }
inp    = { role = "input",  dtype = "float32", shape = ["B", "T", "3 * C"] }
B  = { role = "scalar", dtype = "int32", value = "B" }
T  = { role = "scalar", dtype = "int32", value = "T" }
C  = { role = "scalar", dtype = "int32", value = "C" }
NH = { role = "scalar", dtype = "int32", value = "NH" }

[launch]
block = [256]
grid = ["ceil_div(B * NH * T * T, block.x)"]

[verify]
sizes = [{ B = 2, NH = 3, T = 77, hs = 24 }]   # odd T, and a head size whose scale is not a power of 2
oracle = { preatt = "scores.masked_fill(torch.ones_like(scores, dtype=torch.bool).triu(1), float('-inf'))" }
reduction = "hs"

[verify.intermediates]
q = "inp[:, :, :C].reshape(B, T, NH, hs).transpose(1, 2)"
k = "inp[:, :, C:2 * C].reshape(B, T, NH, hs).transpose(1, 2)"
scores = "(q @ k.transpose(-2, -1)) * (1.0 / math.sqrt(hs))"

[roofline]
flops = "B * NH * T * (T + 1) * hs"   # 2 * hs for each of the T * (T + 1) / 2 scores on or below the diagonal
*/
__global__ void attention_scores(float* preatt, const float* inp, int B, int T, int C, int NH)
{
    int idx = blockIdx.x * blockDim.x + threadIdx.x;
    int total = B * NH * T * T;
    if (idx >= total) return;

    int t2 = idx % T;            // key position
    int t = (idx / T) % T;       // query position
    int h = (idx / (T * T)) % NH;
    int b = idx / (NH * T * T);

    if (t2 > t) {                // a query never sees the future
        preatt[idx] = -INFINITY;
        return;
    }

    int C3 = C * 3;
    int hs = C / NH;
    const float* query = inp + b * T * C3 + t * C3 + h * hs;
    const float* key = inp + b * T * C3 + t2 * C3 + h * hs + C;   // K follows Q in each row

    float dot = 0.0f;
    for (int i = 0; i < hs; i++) {
        dot += query[i] * key[i];
    }
    preatt[idx] = dot * (1.0f / sqrtf((float)hs));
}
