// 3x3 average pooling with stride 1 and zero padding 1 over an NCHW tensor (PyTorch's default
// count_include_pad, so always divided by 9), written like a port of the CPU loop: one thread per
// output, the flat index taken apart with / and %, nine guarded loads each.

#define KSIZE 3
#define PAD 1

typedef float data_t;

/* cuda-agent
[sizes]
N = 32
C = 64
H = 128
W = 128            # 128 MiB in, 128 MiB out

[args]
input  = { role = "input",  dtype = "float32", shape = ["N", "C", "H", "W"] }
output = { role = "output", dtype = "float32", shape = ["N", "C", "H", "W"] }
N = { role = "scalar", dtype = "int32", value = "N" }
C = { role = "scalar", dtype = "int32", value = "C" }
H = { role = "scalar", dtype = "int32", value = "H" }
W = { role = "scalar", dtype = "int32", value = "W" }

[launch]
block = [256]
grid = ["ceil_div(N * C * H * W, block.x)"]

[verify]
sizes = [{ N = 3, C = 5, H = 37, W = 29 }, { N = 1, C = 2, H = 1, W = 3 }]
oracle = { output = "F.avg_pool2d(input, 3, stride=1, padding=1)" }

[roofline]
flops = "10 * N * C * H * W"
*/
__global__ void avg_pool2d_kernel(const data_t* input, data_t* output, int N, int C, int H, int W)
{
    int index = blockIdx.x * blockDim.x + threadIdx.x;
    int total = N * C * H * W;
    if (index < total) {
        int w = index % W;
        int h = (index / W) % H;
        int c = (index / (W * H)) % C;
        int n = index / (W * H * C);

        const data_t* plane = input + (n * C + c) * H * W;
        data_t sum = 0;
        for (int kh = 0; kh < KSIZE; kh++) {
            for (int kw = 0; kw < KSIZE; kw++) {
                int ih = h - PAD + kh;
                int iw = w - PAD + kw;
                if (ih >= 0 && ih < H && iw >= 0 && iw < W) {
                    sum += plane[ih * W + iw];
                }
            }
        }
        output[index] = sum / (KSIZE * KSIZE);
    }
}
