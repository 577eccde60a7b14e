// Causal attention scores: one thread per (head, query, key), a dot product over the head dimension;
// keys after the query get -inf. The oracle masks with masked_fill(..., -math.inf), a form that failed
// the first time it ran in a fresh worker (no builtins: KeyError('__import__')). Must pass.
/* cuda-agent
[sizes]
heads = 16
T = 512
D = 64
[args]
q = { role = "input", dtype = "float32", shape = ["heads", "T", "D"] }
k = { role = "input", dtype = "float32", shape = ["heads", "T", "D"] }
s = { role = "output", dtype = "float32", shape = ["heads", "T", "T"] }
heads = { role = "scalar", dtype = "int32", value = "heads" }
T = { role = "scalar", dtype = "int32", value = "T" }
D = { role = "scalar", dtype = "int32", value = "D" }
scale = { role = "scalar", dtype = "float32", value = 0.125 }
[launch]
block = [256]
grid = ["ceil_div(heads * T * T, block.x)"]
[verify]
oracle = { s = "(q @ k.transpose(-1, -2) * scale).masked_fill(torch.ones(T, T, dtype=torch.bool, device=q.device).triu(1), -math.inf)" }
reduction = "D"
*/
__global__ void causal_scores(const float* q, const float* k, float* s, int heads, int T, int D, float scale) {
    long idx = (long)blockIdx.x * blockDim.x + threadIdx.x;
    if (idx >= (long)heads * T * T) return;
    int h = idx / ((long)T * T), i = (idx / T) % T, j = idx % T;
    if (j > i) {
        s[idx] = __int_as_float(0xff800000);  // -inf
        return;
    }
    const float* qi = q + ((long)h * T + i) * D;
    const float* kj = k + ((long)h * T + j) * D;
    float acc = 0.0f;
    for (int d = 0; d < D; ++d) acc += qi[d] * kj[d];
    s[idx] = acc * scale;
}
