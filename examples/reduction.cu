// A sum where every thread adds its element into one address with a global atomic.

/* cuda-agent
[sizes]
n = 16_777_216

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
reduction = "n"   # float atomics add in any order: the tolerance grows with sqrt(n)
*/
__global__ void sum_atomic(const float* x, float* sum, int n)
{
    int i = blockIdx.x * blockDim.x + threadIdx.x;
    if (i < n) {
        atomicAdd(sum, x[i]);
    }
}
