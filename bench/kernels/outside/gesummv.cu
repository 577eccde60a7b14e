// PolyBench's GESUMMV, y = alpha * A x + beta * B x, one thread per row with both sums kept in the
// output arrays themselves (tmp[i] += ..., y[i] += ...: a load and a store each step, since the
// pointers may overlap). Each thread walks its own rows of A and B, rows 32 KiB apart.

#define ALPHA 1.5f
#define BETA 1.2f

/* cuda-agent
[sizes]
n = 8192           # 256 MiB for A and for B

[args]
A   = { role = "input",  dtype = "float32", shape = ["n", "n"] }
B   = { role = "input",  dtype = "float32", shape = ["n", "n"] }
x   = { role = "input",  dtype = "float32", shape = ["n"] }
y   = { role = "output", dtype = "float32", shape = ["n"] }
tmp = { role = "output", dtype = "float32", shape = ["n"] }
n   = { role = "scalar", dtype = "int32", value = "n" }

[launch]
block = [256]
grid = ["ceil_div(n, block.x)"]

[verify]
sizes = [{ n = 1001 }]
oracle = { tmp = "A @ x", y = "1.5 * (A @ x) + 1.2 * (B @ x)" }
reduction = "n"

[roofline]
flops = "4 * n * n"
*/
__global__ void gesummv(const float* A, const float* B, const float* x, float* y, float* tmp, int n)
{
    int i = blockIdx.x * blockDim.x + threadIdx.x;

    if (i < n) {
        tmp[i] = 0.0f;
        y[i] = 0.0f;
        for (int j = 0; j < n; j++) {
            tmp[i] += A[i * n + j] * x[j];
            y[i] += B[i * n + j] * x[j];
        }
        y[i] = ALPHA * tmp[i] + BETA * y[i];
    }
}
