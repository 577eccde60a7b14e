// The first pass of a vector norm as a course exercise writes it: each thread squares its element into
// shared memory, and after the barrier thread 0 adds up the block's 256 values one by one while the
// other 255 threads wait; the host (not shown) adds the per-block sums.

#define THREADS 256

/* cuda-agent
[sizes]
n = "1 << 26"      # 256 MiB in; 262,144 block sums out

[args]
x      = { role = "input",  dtype = "float32", shape = ["n"] }
sums   = { role = "output", dtype = "float32", shape = ["ceil_div(n, 256)"] }
n      = { role = "scalar", dtype = "int32", value = "n" }

[launch]
block = [256]      # the kernel's shared array holds one value a thread
grid = ["ceil_div(n, 256)"]

[verify]
sizes = [{ n = 100_003 }]   # the last block is partly empty
oracle = { sums = "torch.nn.functional.pad(x * x, (0, (-n) % 256)).reshape(-1, 256).sum(1)" }
reduction = 256

[roofline]
flops = "2 * n"
*/
__global__ void sumsq_blocks(const float* x, float* sums, int n)
{
    __shared__ float squares[THREADS];
    int i = blockIdx.x * THREADS + threadIdx.x;
    float v = i < n ? x[i] : 0.0f;
    squares[threadIdx.x] = v * v;
    __syncthreads();

    if (threadIdx.x == 0) {
        float total = 0.0f;
        for (int t = 0; t < THREADS; ++t) {
            total += squares[t];
        }
        sums[blockIdx.x] = total;
    }
}
