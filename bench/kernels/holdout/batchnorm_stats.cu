// Batch norm's training statistics over an NCHW activation, written the way the formula reads: one
// thread per channel summing its N * H * W values, then a second pass for the variance about the mean.
// Only C = 64 threads run, each walking 200,000 floats.

/* cuda-agent
[sizes]
N = 32
C = 64
HW = 3136          # 56 x 56: 25 MiB of activations

[args]
mean = { role = "output", dtype = "float32", shape = ["C"] }
var  = { role = "output", dtype = "float32", shape = ["C"] }
x    = { role = "input",  dtype = "float32", shape = ["N", "C", "HW"] }
N  = { role = "scalar", dtype = "int32", value = "N" }
C  = { role = "scalar", dtype = "int32", value = "C" }
HW = { role = "scalar", dtype = "int32", value = "HW" }

[launch]
block = [64]
grid = ["ceil_div(C, block.x)"]

[verify]
sizes = [{ N = 5, C = 7, HW = 99 }]
oracle = { mean = "x.mean(dim=(0, 2))", var = "x.var(dim=(0, 2), unbiased=False)" }
reduction = "N * HW"

[roofline]
flops = "4 * N * C * HW"
*/
__global__ void batchnorm_stats(float* mean, float* var, const float* x, int N, int C, int HW)
{
    int c = blockIdx.x * blockDim.x + threadIdx.x;
    if (c < C) {
        float sum = 0.0f;
        for (int n = 0; n < N; ++n) {
            for (int i = 0; i < HW; ++i) {
                sum += x[(n * C + c) * HW + i];
            }
        }
        float m = sum / (N * HW);

        float sq = 0.0f;
        for (int n = 0; n < N; ++n) {
            for (int i = 0; i < HW; ++i) {
                float d = x[(n * C + c) * HW + i] - m;
                sq += d * d;
            }
        }
        mean[c] = m;
        var[c] = sq / (N * HW);
    }
}
