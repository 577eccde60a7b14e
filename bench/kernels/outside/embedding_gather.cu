// GPT-2's input embedding: token embedding plus position embedding, one thread per token walking its
// C channels. A warp's 32 threads write 32 rows C floats apart (every store its own transaction), and
// only B * T = 16384 threads run, so most of the GPU waits on memory latency.

/* cuda-agent
[sizes]
B = 16
T = 1024
C = 768
V = 50257          # GPT-2's vocabulary: 147 MiB of token embeddings
maxT = 1024        # the position table's length; T <= maxT

[args]
out = { role = "output", dtype = "float32", shape = ["B", "T", "C"] }
inp = { role = "input",  dtype = "int32",   shape = ["B", "T"], init = { dist = "integers", low = 0, high = "V" } }
wte = { role = "input",  dtype = "float32", shape = ["V", "C"] }
wpe = { role = "input",  dtype = "float32", shape = ["maxT", "C"] }
B = { role = "scalar", dtype = "int32", value = "B" }
T = { role = "scalar", dtype = "int32", value = "T" }
C = { role = "scalar", dtype = "int32", value = "C" }

[launch]
block = [128]
grid = ["ceil_div(B * T, block.x)"]

[verify]
sizes = [{ B = 3, T = 77, C = 99, V = 1001 }]   # odd widths; only the first 77 positions of wpe are read
oracle = { out = "wte[inp.long()] + wpe[:T]" }

[roofline]
# What every correct kernel moves: the output, the ids, the T used rows of wpe, and the distinct rows of
# wte the ids hit (16384 draws from 50257 rows hit about 85% as many distinct ones: 4/5 stays below).
bytes = "4 * (B * T * C + B * T + T * C + min(V, B * T) * C * 4 // 5)"
flops = "B * T * C"
*/
__global__ void encoder_forward(float* out, const int* inp, const float* wte, const float* wpe,
                                int B, int T, int C)
{
    int idx = blockIdx.x * blockDim.x + threadIdx.x;
    if (idx >= B * T) return;

    int b = idx / T;
    int t = idx % T;
    int token = inp[b * T + t];

    float* out_bt = out + b * T * C + t * C;
    const float* tok_row = wte + token * C;
    const float* pos_row = wpe + t * C;
    for (int c = 0; c < C; c++) {
        out_bt[c] = tok_row[c] + pos_row[c];
    }
}
