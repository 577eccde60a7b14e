// L1 (Manhattan) distances between rows of A and rows of B, each thread a pair, absolute
// differences summed with fabsf.
/* cuda-agent
[sizes]
M = 1536
N = 1024
K = 48

[args]
out = { role = "output", dtype = "float32", shape = ["M", "N"] }
A = { role = "input", dtype = "float32", shape = ["M", "K"] }
B = { role = "input", dtype = "float32", shape = ["N", "K"] }
M = { role = "scalar", dtype = "int32", value = "M" }
N = { role = "scalar", dtype = "int32", value = "N" }
K = { role = "scalar", dtype = "int32", value = "K" }

[launch]
block = [32, 8]
grid = ["ceil_div(N, 32)", "ceil_div(M, 8)"]

[verify]
sizes = [{ M = 29, N = 41, K = 13 }]
oracle = { out = "torch.cdist(A, B, p=1)" }
reduction = "K"
*/
__global__ void manhattan(float* out, const float* A, const float* B, int M, int N, int K)
{
    const int row = blockIdx.y * blockDim.y + threadIdx.y;
    const int col = blockIdx.x * blockDim.x + threadIdx.x;
    if (row < M && col < N) {
        float total = 0;
        for (int k = 0; k < K; k++) {
            total += fabsf(A[row * K + k] - B[col * K + k]);
        }
        out[row * N + col] = total;
    }
}
