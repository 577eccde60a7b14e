// The naive matrix multiply at a size past the L2 (3 × 64 MiB): one thread per output element,
// the K loop from global memory. bench/kernels/matmul_naive.cu is the same kernel at 1 ms.

/* cuda-agent
[sizes]
M = 4096
N = 4096
K = 4096

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
__global__ void matmul_4k(const float* A, const float* B, float* C, int M, int N, int K)
{
    int col = blockIdx.x * blockDim.x + threadIdx.x;
    int row = blockIdx.y * blockDim.y + threadIdx.y;
    if (row < M && col < N) {
        float acc = 0.0f;
        for (int k = 0; k < K; ++k) acc += A[(size_t)row * K + k] * B[(size_t)k * N + col];
        C[(size_t)row * N + col] = acc;
    }
}
