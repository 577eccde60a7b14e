// A 1-D valid convolution whose parameters are named as CUDA code often names them: `in` (a Python
// keyword) and `F` (the filter; also the oracle's name for torch.nn.functional). In the oracle they
// are written in_ and F_; F stays torch.nn.functional.
/* cuda-agent
[sizes]
n = 16777216
k = 7
[args]
in = { role = "input", dtype = "float32", shape = ["n"] }
F = { role = "input", dtype = "float32", shape = ["k"] }
out = { role = "output", dtype = "float32", shape = ["n - k + 1"] }
n = { role = "scalar", dtype = "int32", value = "n" }
k = { role = "scalar", dtype = "int32", value = "k" }
[launch]
block = [256]
grid = ["ceil_div(n - k + 1, block.x)"]
[verify]
oracle = { out = "F.conv1d(in_.view(1, 1, -1), F_.view(1, 1, -1)).view(-1)" }
reduction = "k"
*/
__global__ void conv1d(const float* in, const float* F, float* out, int n, int k) {
    int i = blockIdx.x * blockDim.x + threadIdx.x;
    if (i <= n - k) {
        float acc = 0.0f;
        for (int j = 0; j < k; ++j) acc += in[i + j] * F[j];
        out[i] = acc;
    }
}
