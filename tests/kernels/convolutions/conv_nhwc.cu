// NHWC convolution, channels last: a thread per (pixel, output channel), the output channel along x so
// that a warp's stores are contiguous; the batch on blockIdx.z. Padding 1, a 3x3 window.
#define R 3
/* cuda-agent
[sizes]
N = 8
H = 28
W = 28
C = 64
K = 128
[args]
x = { role = "input",  dtype = "float32", shape = ["N", "H", "W", "C"] }
w = { role = "input",  dtype = "float32", shape = ["K", 3, 3, "C"] }
y = { role = "output", dtype = "float32", shape = ["N", "H", "W", "K"] }
H = { role = "scalar", dtype = "int32", value = "H" }
W = { role = "scalar", dtype = "int32", value = "W" }
C = { role = "scalar", dtype = "int32", value = "C" }
K = { role = "scalar", dtype = "int32", value = "K" }
[launch]
block = [32, 4]
grid = ["ceil_div(K, block.x)", "ceil_div(H * W, block.y)", "N"]
[verify]
sizes = [{ N = 2, H = 5, W = 7, C = 6, K = 9 }]
oracle = { y = "F.conv2d(x.permute(0, 3, 1, 2), w.permute(0, 3, 1, 2), padding=1).permute(0, 2, 3, 1)" }
reduction = "C * 9"
*/
__global__ void conv_nhwc(const float* x, const float* w, float* y, int H, int W, int C, int K)
{
    int oc = blockIdx.x * blockDim.x + threadIdx.x;
    int pix = blockIdx.y * blockDim.y + threadIdx.y;
    int b = blockIdx.z;
    if (oc >= K || pix >= H * W) return;
    int oy = pix / W, ox = pix % W;
    float acc = 0.f;
    for (int dy = 0; dy < R; dy++)
        for (int dx = 0; dx < R; dx++) {
            int iy = oy + dy - 1, ix = ox + dx - 1;
            if (iy >= 0 && iy < H && ix >= 0 && ix < W) {
                const float* px = x + ((b * H + iy) * W + ix) * C;
                const float* wk = w + ((oc * R + dy) * R + dx) * C;
                for (int c = 0; c < C; c++)
                    acc += px[c] * wk[c];
            }
        }
    y[((size_t)b * H * W + pix) * K + oc] = acc;
}
