// 2x bilinear upsampling of an NCHW float tensor with PyTorch's align_corners=False rule, written like
// a port of the reference CPU loop: one thread per output element, the flat index taken apart with /
// and %, four neighbouring input loads and the h/w lambdas computed per thread.

/* cuda-agent
[sizes]
N = 8
C = 32
H = 128
W = 128            # 16 MiB in, 64 MiB out

[args]
x = { role = "input",  dtype = "float32", shape = ["N", "C", "H", "W"] }
y = { role = "output", dtype = "float32", shape = ["N", "C", "2 * H", "2 * W"] }
N = { role = "scalar", dtype = "int32", value = "N" }
C = { role = "scalar", dtype = "int32", value = "C" }
H = { role = "scalar", dtype = "int32", value = "H" }
W = { role = "scalar", dtype = "int32", value = "W" }

[launch]
block = [256]
grid = ["ceil_div(N * C * 4 * H * W, block.x)"]

[verify]
sizes = [{ N = 2, C = 3, H = 13, W = 17 }, { N = 1, C = 1, H = 1, W = 5 }]
oracle = { y = 'F.interpolate(x, scale_factor=2, mode="bilinear", align_corners=False)' }

[roofline]
flops = "11 * N * C * 4 * H * W"
*/
__global__ void upsample_bilinear2x(const float* x, float* y, int N, int C, int H, int W)
{
    int out_h = 2 * H;
    int out_w = 2 * W;
    int idx = blockIdx.x * blockDim.x + threadIdx.x;
    if (idx >= N * C * out_h * out_w) return;

    int ow = idx % out_w;
    int oh = (idx / out_w) % out_h;
    int nc = idx / (out_w * out_h);   // n * C + c

    float rheight = (float)H / out_h;
    float rwidth = (float)W / out_w;

    // source coordinate of the output pixel's centre, never left of the first input pixel
    float h1r = rheight * (oh + 0.5f) - 0.5f;
    if (h1r < 0.0f) h1r = 0.0f;
    int h1 = (int)h1r;
    int h1p = (h1 < H - 1) ? 1 : 0;
    float h1lambda = h1r - h1;
    float h0lambda = 1.0f - h1lambda;

    float w1r = rwidth * (ow + 0.5f) - 0.5f;
    if (w1r < 0.0f) w1r = 0.0f;
    int w1 = (int)w1r;
    int w1p = (w1 < W - 1) ? 1 : 0;
    float w1lambda = w1r - w1;
    float w0lambda = 1.0f - w1lambda;

    const float* src = x + nc * H * W;
    float v00 = src[h1 * W + w1];
    float v01 = src[h1 * W + w1 + w1p];
    float v10 = src[(h1 + h1p) * W + w1];
    float v11 = src[(h1 + h1p) * W + w1 + w1p];

    y[idx] = h0lambda * (w0lambda * v00 + w1lambda * v01) + h1lambda * (w0lambda * v10 + w1lambda * v11);
}
