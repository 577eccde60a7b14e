// y = A x with one thread per row, as the textbook's first GEMV: each thread walks its own row, so a
// warp's loads are 32 rows (32 KiB) apart and 8192 threads leave most of the GPU idle.

/* cuda-agent
[sizes]
M = 8192
N = 8192           # 256 MiB of A

[args]
A = { role = "input",  dtype = "float32", shape = ["M", "N"] }
x = { role = "input",  dtype = "float32", shape = ["N"] }
y = { role = "output", dtype = "float32", shape = ["M"] }
M = { role = "scalar", dtype = "int32", value = "M" }
N = { role = "scalar", dtype = "int32", value = "N" }

[launch]
block = [256]
grid = ["ceil_div(M, block.x)"]

[verify]
sizes = [{ M = 1001, N = 777 }]
oracle = { y = "A @ x" }
reduction = "N"

[roofline]
flops = "2 * M * N"
*/
__global__ void gemv(const float* A, const float* x, float* y, int M, int N)
{
    int row = blockIdx.x * blockDim.x + threadIdx.x;
    if (row < M) {
        float sum = 0.0f;
        for (int col = 0; col < N; col++) {
            sum += A[row * N + col] * x[col];
        }
        y[row] = sum;
    }
}
