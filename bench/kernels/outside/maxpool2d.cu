// 3x3 max pooling, stride 2, padding 1 (a ResNet stem's), NCHW, one thread per output element with the
// flat index unpacked into (n, c, oh, ow) as Caffe-era layers write it. Each input element is read
// by up to four windows from global memory, and the stride-2 window reads leave half of every sector.

#define POOL_K 3
#define POOL_STRIDE 2
#define POOL_PAD 1

/* cuda-agent
[sizes]
N = 64
C = 64
H = 112
W = 112            # 196 MiB in, 49 MiB out
OH = "(H + 2 * 1 - 3) // 2 + 1"
OW = "(W + 2 * 1 - 3) // 2 + 1"

[args]
inp = { role = "input",  dtype = "float32", shape = ["N", "C", "H", "W"] }
out = { role = "output", dtype = "float32", shape = ["N", "C", "OH", "OW"] }
N  = { role = "scalar", dtype = "int32", value = "N" }
C  = { role = "scalar", dtype = "int32", value = "C" }
H  = { role = "scalar", dtype = "int32", value = "H" }
W  = { role = "scalar", dtype = "int32", value = "W" }
OH = { role = "scalar", dtype = "int32", value = "OH" }
OW = { role = "scalar", dtype = "int32", value = "OW" }

[launch]
block = [256]
grid = ["ceil_div(N * C * OH * OW, block.x)"]

[verify]
sizes = [{ N = 2, C = 3, H = 17, W = 23 }]   # odd sides: the last window hangs over the edge
oracle = { out = "F.max_pool2d(inp, 3, 2, 1)" }
*/
__global__ void maxpool2d(const float* inp, float* out, int N, int C, int H, int W, int OH, int OW)
{
    int index = blockIdx.x * blockDim.x + threadIdx.x;
    if (index >= N * C * OH * OW) return;

    int ow = index % OW;
    int oh = (index / OW) % OH;
    int c = (index / OW / OH) % C;
    int n = index / OW / OH / C;

    const float* plane = inp + (n * C + c) * H * W;
    int h0 = oh * POOL_STRIDE - POOL_PAD;
    int w0 = ow * POOL_STRIDE - POOL_PAD;

    float m = -3.402823466e+38f;
    for (int kh = 0; kh < POOL_K; kh++) {
        int h = h0 + kh;
        if (h < 0 || h >= H) continue;
        for (int kw = 0; kw < POOL_K; kw++) {
            int w = w0 + kw;
            if (w < 0 || w >= W) continue;
            m = fmaxf(m, plane[h * W + w]);
        }
    }
    out[index] = m;
}
