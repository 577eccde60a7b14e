// A softmax over dim 0 of a (rows, cols) matrix, one thread per column: a pass for the maximum, one for
// the sum of exponentials, one writing the outputs. Neighbouring threads read neighbouring columns, so
// the loads are coalesced, but only `cols` threads run, each walking 4096 rows three times.

/* cuda-agent
[sizes]
rows = 4096
cols = 4096        # 64 MiB in, 64 MiB out

[args]
y = { role = "output", dtype = "float32", shape = ["rows", "cols"] }
x = { role = "input",  dtype = "float32", shape = ["rows", "cols"] }
rows = { role = "scalar", dtype = "int32", value = "rows" }
cols = { role = "scalar", dtype = "int32", value = "cols" }

[launch]
block = [256]
grid = ["ceil_div(cols, block.x)"]

[verify]
sizes = [{ rows = 77, cols = 301 }]
oracle = { y = "torch.softmax(x, dim=0)" }
reduction = "rows"

[roofline]
flops = "4 * rows * cols"
*/
__global__ void softmax_dim0(float* y, const float* x, int rows, int cols)
{
    int c = blockIdx.x * blockDim.x + threadIdx.x;
    if (c >= cols) return;
    float m = -INFINITY;
    for (int r = 0; r < rows; ++r) m = fmaxf(m, x[r * cols + c]);
    float s = 0.0f;
    for (int r = 0; r < rows; ++r) s += expf(x[r * cols + c] - m);
    for (int r = 0; r < rows; ++r) y[r * cols + c] = expf(x[r * cols + c] - m) / s;
}
