// y = A^T x with one thread per column of A: the loads are coalesced (a warp reads 32 neighbouring
// columns of one row), but only N = 4096 threads run, each a serial walk down 16384 rows.

/* cuda-agent
[sizes]
M = 16384
N = 4096           # 256 MiB of A; not square, so M and N cannot be swapped silently

[args]
A = { role = "input",  dtype = "float32", shape = ["M", "N"] }
x = { role = "input",  dtype = "float32", shape = ["M"] }
y = { role = "output", dtype = "float32", shape = ["N"] }
M = { role = "scalar", dtype = "int32", value = "M" }
N = { role = "scalar", dtype = "int32", value = "N" }

[launch]
block = [256]
grid = ["ceil_div(N, block.x)"]

[verify]
sizes = [{ M = 1001, N = 333 }]
oracle = { y = "A.T @ x" }
reduction = "M"

[roofline]
flops = "2 * M * N"
*/
__global__ void gemv_transposed(const float* A, const float* x, float* y, int M, int N)
{
    int col = blockIdx.x * blockDim.x + threadIdx.x;
    if (col <= N - 1) {
        float acc = 0.0f;
        for (int row = 0; row < M; ++row) {
            acc += A[row * N + col] * x[row];
        }
        y[col] = acc;
    }
}
