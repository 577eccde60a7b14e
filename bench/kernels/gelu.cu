// GELU (tanh approximation), one thread per element: the element-wise first draft.

/* cuda-agent
[sizes]
n = "1 << 26"   # 256 MiB in and 256 MiB out: far past the 60 MB L2

[args]
x = { role = "input",  dtype = "float32", shape = ["n"] }
y = { role = "output", dtype = "float32", shape = ["n"] }
n = { role = "scalar", dtype = "int32", value = "n" }

[launch]
block = [256]
grid = ["ceil_div(n, block.x)"]

[verify]
sizes = [{ n = 1_000_003 }]
oracle = { y = "F.gelu(x, approximate='tanh')" }
tolerance = { atol = 1e-5, rtol = 1e-4 }

[roofline]
flops = "8 * n"
*/
__global__ void gelu(const float* x, float* y, int n)
{
    int i = blockIdx.x * blockDim.x + threadIdx.x;
    if (i < n) {
        float v = x[i];
        float inner = 0.7978845608f * (v + 0.044715f * v * v * v);
        y[i] = 0.5f * v * (1.0f + tanhf(inner));
    }
}
