// The softmax's backward pass as a first port writes it from the formula dx = y * (dy - sum(y * dy)):
// one thread per row, a pass for the dot product and a pass for the gradient. A warp's threads walk 32
// rows C floats apart, so every load is its own transaction.

/* cuda-agent
[sizes]
N = 32768
C = 1024           # 128 MiB for each of y, dy and dx

[args]
dinp = { role = "output", dtype = "float32", shape = ["N", "C"] }
out  = { role = "input",  dtype = "float32", shape = ["N", "C"] }
dout = { role = "input",  dtype = "float32", shape = ["N", "C"] }
N = { role = "scalar", dtype = "int32", value = "N" }
C = { role = "scalar", dtype = "int32", value = "C" }

[launch]
block = [256]
grid = ["ceil_div(N, block.x)"]

[verify]
sizes = [{ N = 301, C = 173 }]
oracle = { dinp = "out * (dout - (out * dout).sum(-1, keepdim=True))" }
reduction = "C"

[roofline]
flops = "4 * N * C"
*/
__global__ void softmax_backward(float* dinp, const float* out, const float* dout, int N, int C)
{
    int row = blockIdx.x * blockDim.x + threadIdx.x;
    if (row >= N) return;

    const float* y = out + row * C;
    const float* dy = dout + row * C;
    float* dx = dinp + row * C;

    float dot = 0.0f;
    for (int i = 0; i < C; i++) {
        dot += y[i] * dy[i];
    }
    for (int i = 0; i < C; i++) {
        dx[i] = y[i] * (dy[i] - dot);
    }
}
