// Rotary position embedding applied to a (B, T, NH, HS) query tensor, one thread per rotated pair,
// the thread taking its flat index apart into (b, t, h, d) and reading the pair's cos and sin from
// tables precomputed per position.

/* cuda-agent
[sizes]
B = 8
T = 2048
NH = 16
HS = 64            # 128 MiB in, 128 MiB out

[args]
out  = { role = "output", dtype = "float32", shape = ["B", "T", "NH", "HS"] }
inp  = { role = "input",  dtype = "float32", shape = ["B", "T", "NH", "HS"] }
fcos = { role = "input",  dtype = "float32", shape = ["T", "HS // 2"] }
fsin = { role = "input",  dtype = "float32", shape = ["T", "HS // 2"] }
B  = { role = "scalar", dtype = "int32", value = "B" }
T  = { role = "scalar", dtype = "int32", value = "T" }
NH = { role = "scalar", dtype = "int32", value = "NH" }
HS = { role = "scalar", dtype = "int32", value = "HS" }

[launch]
block = [256]
grid = ["ceil_div(B * T * NH * (HS // 2), block.x)"]

[verify]
sizes = [{ B = 2, T = 37, NH = 3, HS = 10 }]
oracle = { out = "torch.stack([inp[..., 0::2] * fcos[:, None, :] - inp[..., 1::2] * fsin[:, None, :], inp[..., 0::2] * fsin[:, None, :] + inp[..., 1::2] * fcos[:, None, :]], -1).reshape(inp.shape)" }

[roofline]
flops = "3 * B * T * NH * HS"
*/
__global__ void rope_forward(float* out, const float* inp, const float* fcos, const float* fsin,
                             int B, int T, int NH, int HS)
{
    int idx = blockIdx.x * blockDim.x + threadIdx.x;
    int half = HS / 2;
    if (idx >= B * T * NH * half) return;

    int d = idx % half;
    int h = (idx / half) % NH;
    int t = (idx / (half * NH)) % T;
    int b = idx / (half * NH * T);

    int base = ((b * T + t) * NH + h) * HS;
    float x0 = inp[base + 2 * d];
    float x1 = inp[base + 2 * d + 1];
    float c = fcos[t * half + d];
    float s = fsin[t * half + d];
    out[base + 2 * d] = x0 * c - x1 * s;
    out[base + 2 * d + 1] = x0 * s + x1 * c;
}
