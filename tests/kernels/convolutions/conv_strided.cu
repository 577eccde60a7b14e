// conv2d forward with stride and dilation, a course exercise's first draft: one thread per output pixel,
// blockIdx.z runs over (batch, out channel); rows of the window outside the image are skipped.
/* cuda-agent
[sizes]
N = 4
C = 32
K = 48
H = 64
W = 64
OH = 32
OW = 32
[args]
input  = { role = "input",  dtype = "float32", shape = ["N", "C", "H", "W"] }
weight = { role = "input",  dtype = "float32", shape = ["K", "C", 5, 5] }
output = { role = "output", dtype = "float32", shape = ["N", "K", "OH", "OW"] }
C = { role = "scalar", dtype = "int32", value = "C" }
H = { role = "scalar", dtype = "int32", value = "H" }
W = { role = "scalar", dtype = "int32", value = "W" }
K = { role = "scalar", dtype = "int32", value = "K" }
OH = { role = "scalar", dtype = "int32", value = "OH" }
OW = { role = "scalar", dtype = "int32", value = "OW" }
stride = { role = "scalar", dtype = "int32", value = 2 }
pad = { role = "scalar", dtype = "int32", value = 2 }
[launch]
block = [8, 8]
grid = ["ceil_div(OW, block.x)", "ceil_div(OH, block.y)", "N * K"]
[verify]
sizes = [{ N = 2, C = 3, K = 5, H = 13, W = 11, OH = 7, OW = 6 }]
oracle = { output = "F.conv2d(input, weight, stride=2, padding=2)" }
reduction = "C * 25"
*/
__global__ void conv_forward(const float* __restrict__ input, const float* __restrict__ weight,
                             float* __restrict__ output, const int C, const int H, const int W,
                             const int K, const int OH, const int OW, const int stride, const int pad)
{
    const int ow = blockIdx.x * blockDim.x + threadIdx.x;
    const int oh = blockIdx.y * blockDim.y + threadIdx.y;
    const int k = blockIdx.z % K;
    const int n = blockIdx.z / K;
    if (ow < OW && oh < OH) {
        float sum = 0.0f;
        for (int c = 0; c < C; ++c) {
            for (int kh = 0; kh < 5; ++kh) {
                const int ih = oh * stride - pad + kh;
                if (ih < 0 || ih >= H) continue;
                for (int kw = 0; kw < 5; ++kw) {
                    const int iw = ow * stride - pad + kw;
                    if (iw < 0 || iw >= W) continue;
                    sum += input[((n * C + c) * H + ih) * W + iw] * weight[((k * C + c) * 5 + kh) * 5 + kw];
                }
            }
        }
        output[((n * K + k) * OH + oh) * OW + ow] = sum;
    }
}
