// Double-precision AXPY, BLAS level 1.

/* cuda-agent
[sizes]
n = 8_388_608

[args]
alpha = { role = "scalar", dtype = "float64", value = 0.5 }
x = { role = "input", dtype = "float64", shape = ["n"] }
y = { role = "inout", dtype = "float64", shape = ["n"] }
n = { role = "scalar", dtype = "int32", value = "n" }

[launch]
block = [128]
grid = ["ceil_div(n, block.x)"]

[verify]
sizes = [{ n = 100_003 }]
oracle = { y = "alpha * x + y" }
*/
__global__ void daxpy(double alpha, const double* x, double* y, int n)
{
    int i = blockIdx.x * blockDim.x + threadIdx.x;
    if (i < n) y[i] = alpha * x[i] + y[i];
}
