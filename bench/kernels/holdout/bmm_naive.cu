// A batched matrix product as a PyTorch extension's first CUDA kernel writes it: blockIdx.z picks the
// batch, each thread of a 16 x 16 block computes one element of C with a dot product read straight from
// global memory.

#define BLOCK 16

/* cuda-agent
[sizes]
batch = 32
M = 512
N = 512
K = 512            # 32 MiB for each operand, 17 GFLOP

[args]
A = { role = "input",  dtype = "float32", shape = ["batch", "M", "K"] }
B = { role = "input",  dtype = "float32", shape = ["batch", "K", "N"] }
C = { role = "output", dtype = "float32", shape = ["batch", "M", "N"] }
M = { role = "scalar", dtype = "int32", value = "M" }
N = { role = "scalar", dtype = "int32", value = "N" }
K = { role = "scalar", dtype = "int32", value = "K" }

[launch]
block = [16, 16]
grid = ["ceil_div(N, 16)", "ceil_div(M, 16)", "batch"]

[verify]
sizes = [{ batch = 3, M = 67, N = 45, K = 99 }]
oracle = { C = "torch.bmm(A, B)" }
reduction = "K"

[roofline]
flops = "2 * batch * M * N * K"
*/
__global__ void bmm_naive(const float* A, const float* B, float* C, int M, int N, int K)
{
    int batch = blockIdx.z;
    int row = blockIdx.y * BLOCK + threadIdx.y;
    int col = blockIdx.x * BLOCK + threadIdx.x;

    if (row < M && col < N) {
        const float* a = A + (size_t)batch * M * K;
        const float* b = B + (size_t)batch * K * N;
        float acc = 0.0f;
        for (int k = 0; k < K; ++k) {
            acc += a[row * K + k] * b[k * N + col];
        }
        C[(size_t)batch * M * N + row * N + col] = acc;
    }
}
