// PolyBench's SYRK, C = alpha * A * A^T + beta * C, as its GPU version writes it: one thread per
// element of C on 32x8 blocks, C scaled in place and then accumulated into straight in global memory
// (nothing says C and A do not overlap, so every step stores). A[j][k] is read down a column of
// threads: a warp's 32 loads are 32 rows of A apart.

/* cuda-agent
[sizes]
N = 1024
M = 1024           # 4 MiB of A, 4 MiB of C, 2.1 GFLOP

[args]
A = { role = "input", dtype = "float32", shape = ["N", "M"] }
C = { role = "inout", dtype = "float32", shape = ["N", "N"] }
alpha = { role = "scalar", dtype = "float32", value = 1.5 }
beta  = { role = "scalar", dtype = "float32", value = 1.2 }
N = { role = "scalar", dtype = "int32", value = "N" }
M = { role = "scalar", dtype = "int32", value = "M" }

[launch]
block = [32, 8]
grid = ["ceil_div(N, block.x)", "ceil_div(N, block.y)"]

[verify]
sizes = [{ N = 129, M = 67 }]
oracle = { C = "alpha * (A @ A.T) + beta * C" }
reduction = "M"

[roofline]
flops = "N * (N + 1) * M"   # A A^T is symmetric: 2 * M for each of its N * (N + 1) / 2 distinct entries
*/
__global__ void syrk(const float* A, float* C, float alpha, float beta, int N, int M)
{
    int j = blockIdx.x * blockDim.x + threadIdx.x;
    int i = blockIdx.y * blockDim.y + threadIdx.y;

    if ((i < N) && (j < N)) {
        C[i * N + j] *= beta;
        for (int k = 0; k < M; k++) {
            C[i * N + j] += alpha * A[i * M + k] * A[j * M + k];
        }
    }
}
