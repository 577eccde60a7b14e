// C = A + Bᵀ for square matrices, one thread per element on a 2-D grid of 32 x 8 blocks: A is read
// along rows, coalesced; B is read down its columns, every thread of a warp in another row.

/* cuda-agent
[sizes]
n = 4096           # 64 MiB a matrix

[args]
C = { role = "output", dtype = "float32", shape = ["n", "n"] }
A = { role = "input",  dtype = "float32", shape = ["n", "n"] }
B = { role = "input",  dtype = "float32", shape = ["n", "n"] }
n = { role = "scalar", dtype = "int32", value = "n" }

[launch]
block = [32, 8]
grid = ["ceil_div(n, 32)", "ceil_div(n, 8)"]

[verify]
sizes = [{ n = 99 }]
oracle = { C = "A + B.T" }

[roofline]
flops = "n * n"
*/
__global__ void add_transposed(float* C, const float* A, const float* B, int n)
{
    int col = blockIdx.x * blockDim.x + threadIdx.x;
    int row = blockIdx.y * blockDim.y + threadIdx.y;
    if (row < n && col < n) {
        C[row * n + col] = A[row * n + col] + B[col * n + row];
    }
}
