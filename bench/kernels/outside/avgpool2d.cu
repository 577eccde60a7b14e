// 2x2 average pooling with stride 2 (no padding, odd edges dropped), NCHW, on a 2-D grid of 16x16
// blocks over the output plane with blockIdx.z for (n, c), as tutorials launch it. Each thread reads
// two pairs of neighbours: the stride-2 loads use half of each sector they fetch.

/* cuda-agent
[sizes]
N = 64
C = 64
H = 112
W = 112            # 196 MiB in, 49 MiB out

[args]
x = { role = "input",  dtype = "float32", shape = ["N", "C", "H", "W"] }
y = { role = "output", dtype = "float32", shape = ["N", "C", "H // 2", "W // 2"] }
H = { role = "scalar", dtype = "int32", value = "H" }
W = { role = "scalar", dtype = "int32", value = "W" }

[launch]
block = [16, 16]
grid = ["ceil_div(W // 2, block.x)", "ceil_div(H // 2, block.y)", "N * C"]

[verify]
sizes = [{ N = 2, C = 3, H = 17, W = 23 }]   # odd sides: the last row and column are dropped
oracle = { y = "F.avg_pool2d(x, 2)" }
*/
__global__ void avgpool2d(const float* x, float* y, int H, int W)
{
    int ow = blockIdx.x * blockDim.x + threadIdx.x;
    int oh = blockIdx.y * blockDim.y + threadIdx.y;
    int plane = blockIdx.z;          // n * C + c
    int OH = H / 2;
    int OW = W / 2;
    if (ow >= OW || oh >= OH) return;

    const float* in = x + (size_t)plane * H * W;
    float* o = y + (size_t)plane * OH * OW;
    int h = 2 * oh;
    int w = 2 * ow;
    float s = in[h * W + w] + in[h * W + w + 1] + in[(h + 1) * W + w] + in[(h + 1) * W + w + 1];
    o[oh * OW + ow] = s / 4.0f;
}
