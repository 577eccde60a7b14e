// A layer that also updates its parameters in place: y = relu(x + bias) with the bias before the step,
// then bias -= lr * grad. The oracle gives y as a PyTorch expression; bias, an inout left out of the
// oracle, is checked against the original kernel. One thread per column walks the rows (coalesced).
/* cuda-agent
[sizes]
rows = 4096
cols = 4096
[args]
x = { role = "input", dtype = "float32", shape = ["rows", "cols"] }
bias = { role = "inout", dtype = "float32", shape = ["cols"] }
grad = { role = "input", dtype = "float32", shape = ["cols"] }
y = { role = "output", dtype = "float32", shape = ["rows", "cols"] }
rows = { role = "scalar", dtype = "int32", value = "rows" }
cols = { role = "scalar", dtype = "int32", value = "cols" }
lr = { role = "scalar", dtype = "float32", value = 0.01 }
[launch]
block = [128]
grid = ["ceil_div(cols, block.x)"]
[verify]
oracle = { y = "torch.relu(x + bias)" }
*/
__global__ void bias_relu_update(const float* x, float* bias, const float* grad, float* y, int rows, int cols,
                                 float lr) {
    int c = blockIdx.x * blockDim.x + threadIdx.x;
    if (c >= cols) return;
    float b = bias[c];
    for (int r = 0; r < rows; ++r) {
        float v = x[(long)r * cols + c] + b;
        y[(long)r * cols + c] = v > 0.0f ? v : 0.0f;
    }
    bias[c] = b - lr * grad[c];
}
