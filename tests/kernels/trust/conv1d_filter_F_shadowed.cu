// The filter argument F, written as the user would before the spelling rule: F.view(...) meant the
// filter, but F is torch.nn.functional in an oracle. Before: passed the spec check, failed on the GPU.
/* cuda-agent
[sizes]
n = 16777216
k = 7
[args]
x = { role = "input", dtype = "float32", shape = ["n"] }
F = { role = "input", dtype = "float32", shape = ["k"] }
out = { role = "output", dtype = "float32", shape = ["n - k + 1"] }
n = { role = "scalar", dtype = "int32", value = "n" }
k = { role = "scalar", dtype = "int32", value = "k" }
[launch]
block = [256]
grid = ["ceil_div(n - k + 1, block.x)"]
[verify]
oracle = { out = "F.conv1d(x.view(1, 1, -1), F.view(1, 1, -1)).view(-1)" }
reduction = "k"
*/
__global__ void conv1d(const float* x, const float* F, float* out, int n, int k) {
    int i = blockIdx.x * blockDim.x + threadIdx.x;
    if (i <= n - k) {
        float acc = 0.0f;
        for (int j = 0; j < k; ++j) acc += x[i + j] * F[j];
        out[i] = acc;
    }
}
