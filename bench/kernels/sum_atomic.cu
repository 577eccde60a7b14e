// A sum where every thread adds its element into one address with a global atomic.

/* cuda-agent
[sizes]
n = "1 << 26"   # 256 MiB of float32

[args]
x   = { role = "input", dtype = "float32", shape = ["n"] }
sum = { role = "inout", dtype = "float32", shape = [1], init = "zeros" }
n   = { role = "scalar", dtype = "int32", value = "n" }

[launch]
block = [256]
grid = ["ceil_div(n, block.x)"]

[verify]
sizes = [{ n = 999_999 }]
oracle = { sum = "x.sum().reshape(1)" }
# One float atomic after another into one address: the rounding error of that sequential sum has a
# standard deviation of about n * 2^-23 / sqrt(24), 1.6 at n = 2^26. 8 is five of those, and still
# 0.1% of the sum's own spread (sqrt(n) = 8192), so no shortcut fits inside it.
tolerance = { atol = 8.0, rtol = 1e-5 }
*/
__global__ void sum_atomic(const float* x, float* sum, int n)
{
    int i = blockIdx.x * blockDim.x + threadIdx.x;
    if (i < n) {
        atomicAdd(sum, x[i]);
    }
}
