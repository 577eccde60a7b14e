// Inclusive prefix sums of each 1024-element segment, one block per segment: a naive Hillis-Steele
// scan in shared memory (log2(1024) = 10 steps of n additions each, two barriers per step).

#define SEG 1024

/* cuda-agent
[sizes]
segments = 65536
seg = 1024                  # must equal SEG in the kernel
n = "segments * seg"        # 256 MiB in, 256 MiB out

[args]
x = { role = "input",  dtype = "float32", shape = ["n"] }
y = { role = "output", dtype = "float32", shape = ["n"] }
n = { role = "scalar", dtype = "int32", value = "n" }

[launch]
block = [1024]              # one thread per segment element: the kernel assumes blockDim.x == SEG
grid = ["ceil_div(n, 1024)"]

[verify]
sizes = [{ segments = 333 }]
oracle = { y = "torch.cumsum(x.reshape(-1, seg), 1).reshape(-1)" }
reduction = "seg"

[roofline]
flops = "n"
*/
__global__ void scan_segmented(const float* x, float* y, int n)
{
    __shared__ float buf[SEG];
    int t = threadIdx.x;
    int i = blockIdx.x * SEG + t;
    buf[t] = i < n ? x[i] : 0.0f;
    __syncthreads();
    for (int offset = 1; offset < SEG; offset <<= 1) {
        float left = t >= offset ? buf[t - offset] : 0.0f;
        __syncthreads();
        buf[t] += left;
        __syncthreads();
    }
    if (i < n) y[i] = buf[t];
}
