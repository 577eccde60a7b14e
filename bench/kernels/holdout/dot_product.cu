// The dot product from the classic CUDA introduction: each thread strides over the vectors with a
// per-thread sum, the block adds its threads' sums in a shared-memory tree, and thread 0 adds the
// block's sum into the result. The book caps the grid at 32 blocks.

#define imin(a, b) (a < b ? a : b)
const int threadsPerBlock = 256;

/* cuda-agent
[sizes]
N = 16777216       # 64 MiB a vector

[args]
a = { role = "input", dtype = "float32", shape = ["N"] }
b = { role = "input", dtype = "float32", shape = ["N"] }
c = { role = "inout", dtype = "float32", shape = [1], init = "zeros" }
N = { role = "scalar", dtype = "int32", value = "N" }

[launch]
block = [256]
grid = ["min(32, ceil_div(N, 256))"]

[verify]
sizes = [{ N = 100003 }]
oracle = { c = "(a * b).sum().reshape(1)" }
reduction = "N"

[roofline]
flops = "2 * N"
*/
__global__ void dot(const float* a, const float* b, float* c, int N)
{
    __shared__ float cache[threadsPerBlock];
    int tid = threadIdx.x + blockIdx.x * blockDim.x;
    int cacheIndex = threadIdx.x;

    float temp = 0;
    while (tid < N) {
        temp += a[tid] * b[tid];
        tid += blockDim.x * gridDim.x;
    }
    cache[cacheIndex] = temp;
    __syncthreads();

    // threadsPerBlock must be a power of 2
    int i = blockDim.x / 2;
    while (i != 0) {
        if (cacheIndex < i)
            cache[cacheIndex] += cache[cacheIndex + i];
        __syncthreads();
        i /= 2;
    }

    if (cacheIndex == 0)
        atomicAdd(c, cache[0]);
}
