// Per-channel sums of an NCHW float64 tensor (a batch-statistics first draft): one thread per
// element works out its channel and adds into it with a double-precision atomicAdd, so every
// element of a channel queues on the same one of C addresses.

/* cuda-agent
[sizes]
N = 16
C = 64
HW = "64 * 64"     # 32 MiB of float64

[args]
x    = { role = "input", dtype = "float64", shape = ["N", "C", "HW"] }
sums = { role = "inout", dtype = "float64", shape = ["C"], init = "zeros" }
N    = { role = "scalar", dtype = "int32", value = "N" }
C    = { role = "scalar", dtype = "int32", value = "C" }
HW   = { role = "scalar", dtype = "int32", value = "HW" }

[launch]
block = [256]
grid = ["ceil_div(N * C * HW, block.x)"]

[verify]
sizes = [{ N = 3, C = 5, HW = 77 }]
oracle = { sums = "x.sum(dim=(0, 2))" }
reduction = "N * HW"

[roofline]
flops = "N * C * HW"
*/
__global__ void channel_sum_atomic_fp64(const double* x, double* sums, int N, int C, int HW)
{
    int idx = blockIdx.x * blockDim.x + threadIdx.x;
    int total = N * C * HW;
    if (idx < total) {
        int c = (idx / HW) % C;
        atomicAdd(&sums[c], x[idx]);
    }
}
