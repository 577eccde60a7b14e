// Reduction #1 of the classic optimisation slides as courses hand it in: each block loads 256 elements
// into shared memory and halves them with interleaved addressing and a divergent modulo test, leaving
// one partial sum a block for the host (or a second launch) to add. No length parameter: the grid
// covers the input exactly.

/* cuda-agent
[sizes]
n = 16777216

[args]
g_idata = { role = "input",  dtype = "float32", shape = ["n"] }
g_odata = { role = "output", dtype = "float32", shape = ["n // 256"] }

[launch]
block = [256]
grid = ["n // 256"]
shared_bytes = "block.x * 4"

[verify]
sizes = [{ n = 65536 }]
oracle = { g_odata = "g_idata.reshape(-1, 256).sum(1)" }
reduction = "256"

[roofline]
flops = "n"
*/
__global__ void reduce0(const float* g_idata, float* g_odata)
{
    extern __shared__ float sdata[];
    unsigned int tid = threadIdx.x;
    unsigned int i = blockIdx.x * blockDim.x + threadIdx.x;
    sdata[tid] = g_idata[i];
    __syncthreads();

    for (unsigned int s = 1; s < blockDim.x; s *= 2) {
        if (tid % (2 * s) == 0) {
            sdata[tid] += sdata[tid + s];
        }
        __syncthreads();
    }
    if (tid == 0) g_odata[blockIdx.x] = sdata[0];
}
