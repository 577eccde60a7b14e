// A 1-D convolution ("valid", cross-correlation as in deep learning) with a 31-tap filter, one thread
// per output: every input element is read 31 times from global memory.

/* cuda-agent
[sizes]
n = "1 << 25"     # 128 MiB in, 128 MiB out
taps = 31
m = "n - taps + 1"

[args]
x    = { role = "input",  dtype = "float32", shape = ["n"] }
w    = { role = "input",  dtype = "float32", shape = ["taps"] }
y    = { role = "output", dtype = "float32", shape = ["m"] }
n    = { role = "scalar", dtype = "int32", value = "n" }
taps = { role = "scalar", dtype = "int32", value = "taps" }

[launch]
block = [256]
grid = ["ceil_div(m, block.x)"]

[verify]
sizes = [{ n = 100_003 }, { n = 40, taps = 7 }]
# Written as a matrix-vector product over a sliding window, not F.conv1d: cuDNN convolutions may run
# in TF32 by default (torch.backends.cudnn.allow_tf32), far outside float32 tolerances.
oracle = { y = "x.unfold(0, taps, 1) @ w" }
reduction = "taps"

[roofline]
flops = "2 * taps * m"
*/
__global__ void conv1d(const float* x, const float* w, float* y, int n, int taps)
{
    int i = blockIdx.x * blockDim.x + threadIdx.x;
    int m = n - taps + 1;
    if (i < m) {
        float acc = 0.0f;
        for (int k = 0; k < taps; ++k) acc += x[i + k] * w[k];
        y[i] = acc;
    }
}
