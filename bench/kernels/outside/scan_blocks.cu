// An inclusive prefix sum over a whole array that needs many blocks, as a first draft does it in one
// kernel: each block scans its 512 elements in shared memory (Hillis-Steele), and its thread 0 adds
// up, one by one, every element before the block to get the block's carry. The carry loop is O(n) a
// block: the last block's thread 0 reads a million floats in a row while the rest of its block waits.

#define BLOCK_SIZE 512

/* cuda-agent
[sizes]
n = "1 << 20"      # 4 MiB in, 4 MiB out; 2048 blocks

[args]
in  = { role = "input",  dtype = "float32", shape = ["n"] }
out = { role = "output", dtype = "float32", shape = ["n"] }
n   = { role = "scalar", dtype = "int32", value = "n" }

[launch]
block = [512]      # one thread per element of a block's chunk: the kernel assumes blockDim.x == BLOCK_SIZE
grid = ["ceil_div(n, 512)"]

[verify]
sizes = [{ n = 100_003 }]   # the last block is partly empty
oracle = { out = "torch.cumsum(in_, 0)" }
reduction = "n"

[roofline]
flops = "n"
*/
__global__ void scan_blocks(const float* in, float* out, int n)
{
    __shared__ float temp[BLOCK_SIZE];
    __shared__ float carry;

    int tid = threadIdx.x;
    int start = blockIdx.x * BLOCK_SIZE;
    int gid = start + tid;
    temp[tid] = gid < n ? in[gid] : 0.0f;

    if (tid == 0) {
        float before = 0.0f;
        for (int j = 0; j < start; j++) before += in[j];
        carry = before;
    }
    __syncthreads();

    for (int offset = 1; offset < BLOCK_SIZE; offset *= 2) {
        float left = 0.0f;
        if (tid >= offset) left = temp[tid - offset];
        __syncthreads();
        temp[tid] += left;
        __syncthreads();
    }

    if (gid < n) out[gid] = temp[tid] + carry;
}
