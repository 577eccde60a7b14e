// A direct 3x3 convolution (padding 1, stride 1) with bias, NCHW, one thread per output pixel on
// 16x16 blocks with blockIdx.z for (image, output channel): every thread reads its 3x3 window of every
// input channel and the whole filter from global memory, nothing kept in shared memory or registers.

#define KS 3
#define PAD 1

/* cuda-agent
[sizes]
N = 8
C = 64
K = 64             # output channels
H = 56
W = 56             # 1.85 GFLOP; 6 MiB in, 6 MiB out

[args]
x    = { role = "input",  dtype = "float32", shape = ["N", "C", "H", "W"] }
w    = { role = "input",  dtype = "float32", shape = ["K", "C", 3, 3] }
bias = { role = "input",  dtype = "float32", shape = ["K"] }
y    = { role = "output", dtype = "float32", shape = ["N", "K", "H", "W"] }
C = { role = "scalar", dtype = "int32", value = "C" }
K = { role = "scalar", dtype = "int32", value = "K" }
H = { role = "scalar", dtype = "int32", value = "H" }
W = { role = "scalar", dtype = "int32", value = "W" }

[launch]
block = [16, 16]
grid = ["ceil_div(W, block.x)", "ceil_div(H, block.y)", "N * K"]

[verify]
sizes = [{ N = 2, C = 3, K = 5, H = 17, W = 23 }]
oracle = { y = "F.conv2d(x, w, bias, padding=1)" }
reduction = "C * 9"

[roofline]
flops = "2 * N * K * H * W * C * 9"
*/
__global__ void conv2d_naive(const float* x, const float* w, const float* bias, float* y,
                             int C, int K, int H, int W)
{
    int col = blockIdx.x * blockDim.x + threadIdx.x;
    int row = blockIdx.y * blockDim.y + threadIdx.y;
    int n = blockIdx.z / K;
    int k = blockIdx.z % K;
    if (row >= H || col >= W) return;

    float acc = bias[k];
    for (int c = 0; c < C; c++) {
        const float* x_plane = x + ((size_t)n * C + c) * H * W;
        const float* w_kc = w + ((size_t)k * C + c) * KS * KS;
        for (int i = 0; i < KS; i++) {
            for (int j = 0; j < KS; j++) {
                int in_row = row + i - PAD;
                int in_col = col + j - PAD;
                if (in_row >= 0 && in_row < H && in_col >= 0 && in_col < W) {
                    acc += x_plane[in_row * W + in_col] * w_kc[i * KS + j];
                }
            }
        }
    }
    y[((size_t)n * K + k) * H * W + row * W + col] = acc;
}
