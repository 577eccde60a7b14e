// A PyTorch-extension style conv2d forward: one thread per output element on a flat index taken apart
// into (n, k, oh, ow), a bias added at the end, padding as a parameter.
#include <cuda_runtime.h>

/* cuda-agent
[sizes]
batch = 8
in_channels = 32
out_channels = 96
height = 40
width = 40
[args]
input  = { role = "input",  dtype = "float32", shape = ["batch", "in_channels", "height", "width"] }
weight = { role = "input",  dtype = "float32", shape = ["out_channels", "in_channels", 3, 3] }
bias   = { role = "input",  dtype = "float32", shape = ["out_channels"] }
output = { role = "output", dtype = "float32", shape = ["batch", "out_channels", "height", "width"] }
total = { role = "scalar", dtype = "int32", value = "batch * out_channels * height * width" }
in_channels = { role = "scalar", dtype = "int32", value = "in_channels" }
out_channels = { role = "scalar", dtype = "int32", value = "out_channels" }
height = { role = "scalar", dtype = "int32", value = "height" }
width = { role = "scalar", dtype = "int32", value = "width" }
ksize = { role = "scalar", dtype = "int32", value = 3 }
padding = { role = "scalar", dtype = "int32", value = 1 }
[launch]
block = [256]
grid = ["ceil_div(batch * out_channels * height * width, block.x)"]
[verify]
sizes = [{ batch = 2, in_channels = 3, out_channels = 5, height = 9, width = 13 }]
oracle = { output = "F.conv2d(input, weight, bias, padding=1)" }
reduction = "in_channels * 9"
*/
__global__ void conv2d_forward_kernel(const float* __restrict__ input, const float* __restrict__ weight,
                                      const float* __restrict__ bias, float* __restrict__ output,
                                      int total, int in_channels, int out_channels, int height, int width,
                                      int ksize, int padding)
{
    int index = blockIdx.x * blockDim.x + threadIdx.x;
    if (index >= total) return;
    int w_out = index % width;
    int h_out = (index / width) % height;
    int c_out = (index / (width * height)) % out_channels;
    int n = index / (width * height * out_channels);

    float value = 0.0f;
    for (int c_in = 0; c_in < in_channels; ++c_in) {
        for (int kh = 0; kh < ksize; ++kh) {
            for (int kw = 0; kw < ksize; ++kw) {
                int h_in = h_out - padding + kh;
                int w_in = w_out - padding + kw;
                if (h_in >= 0 && h_in < height && w_in >= 0 && w_in < width) {
                    value += input[((n * in_channels + c_in) * height + h_in) * width + w_in]
                           * weight[((c_out * in_channels + c_in) * ksize + kh) * ksize + kw];
                }
            }
        }
    }
    output[index] = value + bias[c_out];
}
