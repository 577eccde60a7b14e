// A block sum in shared memory as the textbook's first version writes it: interleaved addressing
// (tid % (2 * s)), so warps diverge and half the threads idle from the first step; one atomic per block.

/* cuda-agent
[sizes]
n = "1 << 26"   # 256 MiB of float32

[args]
x     = { role = "input", dtype = "float32", shape = ["n"] }
total = { role = "inout", dtype = "float32", shape = [1], init = "zeros" }
n     = { role = "scalar", dtype = "int32", value = "n" }

[launch]
block = [256]
grid = ["ceil_div(n, block.x)"]
shared_bytes = "block.x * 4"

[verify]
sizes = [{ n = 999_999 }]
oracle = { total = "x.sum().reshape(1)" }
reduction = "n"
*/
__global__ void reduce_shared(const float* x, float* total, int n)
{
    extern __shared__ float partial[];
    unsigned int tid = threadIdx.x;
    unsigned int i = blockIdx.x * blockDim.x + threadIdx.x;
    partial[tid] = i < n ? x[i] : 0.0f;
    __syncthreads();
    for (unsigned int s = 1; s < blockDim.x; s *= 2) {
        if (tid % (2 * s) == 0 && tid + s < blockDim.x) {
            partial[tid] += partial[tid + s];
        }
        __syncthreads();
    }
    if (tid == 0) atomicAdd(total, partial[0]);
}
