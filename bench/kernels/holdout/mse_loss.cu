// A mean-squared-error loss as a custom training loop's first kernel: every thread adds its squared
// difference, already divided by n, into one float with atomicAdd.

/* cuda-agent
[sizes]
n = 16777216       # 64 MiB for each of pred and target

[args]
pred   = { role = "input", dtype = "float32", shape = ["n"] }
target = { role = "input", dtype = "float32", shape = ["n"] }
loss   = { role = "inout", dtype = "float32", shape = [1], init = "zeros" }
n = { role = "scalar", dtype = "int32", value = "n" }

[launch]
block = [256]
grid = ["ceil_div(n, block.x)"]

[verify]
sizes = [{ n = 100003 }]
oracle = { loss = "((pred - target) ** 2).mean().reshape(1)" }
reduction = "n"

[roofline]
flops = "3 * n"
*/
__global__ void mse_loss(const float* pred, const float* target, float* loss, int n)
{
    int i = blockIdx.x * blockDim.x + threadIdx.x;
    if (i < n) {
        float diff = pred[i] - target[i];
        atomicAdd(loss, diff * diff / n);
    }
}
