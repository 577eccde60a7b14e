// PReLU forward over an NCHW float32 tensor with one learned slope per channel, in Caffe's style:
// the CUDA_KERNEL_LOOP grid-stride macro, a 512-thread CAFFE_GET_BLOCKS launch, and the channel
// recovered from the flat index with a divide and a modulo for every element.

#define CUDA_KERNEL_LOOP(i, n) \
    for (int i = blockIdx.x * blockDim.x + threadIdx.x; i < (n); i += blockDim.x * gridDim.x)

#define CAFFE_CUDA_NUM_THREADS 512
#define CAFFE_GET_BLOCKS(n) (((n) + CAFFE_CUDA_NUM_THREADS - 1) / CAFFE_CUDA_NUM_THREADS)

/* cuda-agent
[sizes]
N = 32
C = 64
HW = "56 * 56"     # a ResNet stage's feature map: 24.5 MiB in, 24.5 MiB out

[args]
n          = { role = "scalar", dtype = "int32", value = "N * C * HW" }
channels   = { role = "scalar", dtype = "int32", value = "C" }
dim        = { role = "scalar", dtype = "int32", value = "HW" }
in         = { role = "input",  dtype = "float32", shape = ["N", "C", "HW"] }
out        = { role = "output", dtype = "float32", shape = ["N", "C", "HW"] }
slope_data = { role = "input",  dtype = "float32", shape = ["C"], init = { dist = "uniform", low = 0, high = 0.5 } }

[launch]
block = [512]
grid = ["ceil_div(N * C * HW, block.x)"]

[verify]
sizes = [{ N = 3, C = 7, HW = 101 }]
oracle = { out = "F.prelu(in_, slope_data)" }

[roofline]
flops = "N * C * HW"
*/
__global__ void PReLUForwardChannels(const int n, const int channels, const int dim,
                                     const float* in, float* out, const float* slope_data)
{
    CUDA_KERNEL_LOOP(index, n) {
        const int c = (index / dim) % channels;
        out[index] = in[index] > 0 ? in[index] : in[index] * slope_data[c];
    }
}

// What the layer's Forward_gpu does with its blobs.
void prelu_forward_gpu(int num, int channels, int height, int width,
                       const float* bottom_data, float* top_data, const float* slope_data)
{
    const int dim = height * width;
    const int count = num * channels * dim;
    PReLUForwardChannels<<<CAFFE_GET_BLOCKS(count), CAFFE_CUDA_NUM_THREADS>>>(
        count, channels, dim, bottom_data, top_data, slope_data);
}
