// An honest fp32 direct convolution (NCHW, 3x3, no padding), one thread per output, fp32 accumulation.
// Its oracle is F.conv2d, which cuDNN may run in TF32 unless the verifier turns that off: then this
// kernel misses fp32 tolerances, and a kernel that rounds its inputs to TF32 matches. Must pass.
/* cuda-agent
[sizes]
N = 4
C = 64
H = 66
W = 66
K = 64
[args]
x = { role = "input", dtype = "float32", shape = ["N", "C", "H", "W"] }
w = { role = "input", dtype = "float32", shape = ["K", "C", 3, 3] }
y = { role = "output", dtype = "float32", shape = ["N", "K", "H - 2", "W - 2"] }
N = { role = "scalar", dtype = "int32", value = "N" }
C = { role = "scalar", dtype = "int32", value = "C" }
H = { role = "scalar", dtype = "int32", value = "H" }
W = { role = "scalar", dtype = "int32", value = "W" }
K = { role = "scalar", dtype = "int32", value = "K" }
[launch]
block = [256]
grid = ["ceil_div(N * K * (H - 2) * (W - 2), block.x)"]
[verify]
oracle = { y = "F.conv2d(x, w)" }
reduction = "C * 9"
*/
__global__ void conv2d_3x3(const float* x, const float* w, float* y, int N, int C, int H, int W, int K) {
    int Ho = H - 2, Wo = W - 2;
    long idx = (long)blockIdx.x * blockDim.x + threadIdx.x;
    if (idx >= (long)N * K * Ho * Wo) return;
    int ow = idx % Wo, oh = (idx / Wo) % Ho, k = (idx / ((long)Wo * Ho)) % K, n = idx / ((long)Wo * Ho * K);
    float acc = 0.0f;
    for (int c = 0; c < C; ++c)
        for (int r = 0; r < 3; ++r)
            for (int s = 0; s < 3; ++s)
                acc += x[(((long)n * C + c) * H + oh + r) * W + ow + s] * w[((k * C + c) * 3 + r) * 3 + s];
    y[idx] = acc;
}
