// A GPT-2 layer norm forward pass over (B, T, C) as the first CUDA port writes it: one thread per
// (b, t) position with `const float* x = inp + idx * C`, a pass for the mean, a pass for the variance,
// a pass for the output, and the mean and 1/std saved for the backward pass.

/* cuda-agent
[sizes]
B = 32
T = 1024
C = 768            # 96 MiB in, 96 MiB out

[args]
out    = { role = "output", dtype = "float32", shape = ["B", "T", "C"] }
mean   = { role = "output", dtype = "float32", shape = ["B", "T"] }
rstd   = { role = "output", dtype = "float32", shape = ["B", "T"] }
inp    = { role = "input",  dtype = "float32", shape = ["B", "T", "C"] }
weight = { role = "input",  dtype = "float32", shape = ["C"] }
bias   = { role = "input",  dtype = "float32", shape = ["C"] }
N = { role = "scalar", dtype = "int32", value = "B * T" }
C = { role = "scalar", dtype = "int32", value = "C" }

[launch]
block = [256]
grid = ["ceil_div(B * T, block.x)"]

[verify]
sizes = [{ B = 3, T = 77, C = 99 }]
oracle = { out = "F.layer_norm(inp, (C,), weight, bias, 1e-5)", mean = "inp.mean(dim=-1)", rstd = "torch.rsqrt(inp.var(dim=-1, unbiased=False) + 1e-5)" }
reduction = "C"

[roofline]
flops = "8 * B * T * C"
*/
__global__ void layernorm_forward(float* out, float* mean, float* rstd, const float* inp,
                                  const float* weight, const float* bias, int N, int C)
{
    int idx = blockIdx.x * blockDim.x + threadIdx.x;
    float eps = 1e-5f;

    if (idx < N) {
        const float* x = inp + idx * C;
        float m = 0.0f;
        for (int i = 0; i < C; i++) {
            m += x[i];
        }
        m = m / C;

        float v = 0.0f;
        for (int i = 0; i < C; i++) {
            float xshift = x[i] - m;
            v += xshift * xshift;
        }
        v = v / C;
        float s = 1.0f / sqrtf(v + eps);

        float* out_idx = out + idx * C;
        for (int i = 0; i < C; i++) {
            float n = s * (x[i] - m);
            out_idx[i] = n * weight[i] + bias[i];
        }
        mean[idx] = m;
        rstd[idx] = s;
    }
}
