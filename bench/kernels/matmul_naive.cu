// A first-draft matrix multiply: one thread per output element, K loop from global memory.
// About 1 ms on an H200 at these sizes: the engine benchmark's "1 ms kernel".

/* cuda-agent
[sizes]
M = 1024
N = 1024
K = 2048

[args]
A = { role = "input",  dtype = "float32", shape = ["M", "K"] }
B = { role = "input",  dtype = "float32", shape = ["K", "N"] }
C = { role = "output", dtype = "float32", shape = ["M", "N"] }
M = { role = "scalar", dtype = "int32", value = "M" }
N = { role = "scalar", dtype = "int32", value = "N" }
K = { role = "scalar", dtype = "int32", value = "K" }

[launch]
block = [16, 16]
grid = ["ceil_div(N, block.x)", "ceil_div(M, block.y)"]

[verify]
sizes = [{ M = 129, N = 67, K = 100 }]
oracle = { C = "A @ B" }
reduction = "K"

[roofline]
flops = "2 * M * N * K"
*/
__global__ void matmul(const float* A, const float* B, float* C, int M, int N, int K)
{
    int col = blockIdx.x * blockDim.x + threadIdx.x;
    int row = blockIdx.y * blockDim.y + threadIdx.y;
    if (row < M && col < N) {
        float acc = 0.0f;
        for (int k = 0; k < K; ++k) acc += A[row * K + k] * B[k * N + col];
        C[row * N + col] = acc;
    }
}
