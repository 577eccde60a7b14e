// A half-precision matmul as a course exercise writes it once it has moved to fp16: one thread per
// output on 16x16 blocks, the products converted to float and summed in float, the result rounded back.
#include <cuda_fp16.h>

/* cuda-agent
[sizes]
M = 2048
N = 2048
K = 2048

[args]
A = { role = "input", dtype = "float16", shape = ["M", "K"] }
B = { role = "input", dtype = "float16", shape = ["K", "N"] }
C = { role = "output", dtype = "float16", shape = ["M", "N"] }
M = { role = "scalar", dtype = "int32", value = "M" }
N = { role = "scalar", dtype = "int32", value = "N" }
K = { role = "scalar", dtype = "int32", value = "K" }

[launch]
block = [16, 16]
grid = ["ceil_div(N, block.x)", "ceil_div(M, block.y)"]

[verify]
sizes = [{ M = 129, N = 67, K = 100 }, { M = 256, N = 264, K = 72 }]
oracle = { C = "(A.float() @ B.float()).half()" }
reduction = "K"

[roofline]
flops = "2 * M * N * K"
*/
__global__ void matmul_half(const __half* A, const __half* B, __half* C, int M, int N, int K)
{
    int row = blockIdx.y * blockDim.y + threadIdx.y;
    int col = blockIdx.x * blockDim.x + threadIdx.x;
    if (row < M && col < N) {
        float sum = 0.0f;
        for (int k = 0; k < K; ++k) {
            sum += __half2float(A[row * K + k]) * __half2float(B[k * N + col]);
        }
        C[row * N + col] = __float2half(sum);
    }
}
