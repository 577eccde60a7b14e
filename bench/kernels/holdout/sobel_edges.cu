// Sobel edge magnitude on a float image, the nine neighbours read straight from global memory and the
// border left at zero, as an image-processing assignment writes it.

/* cuda-agent
[sizes]
height = 4096
width = 4096       # 64 MiB in, 64 MiB out

[args]
out = { role = "output", dtype = "float32", shape = ["height", "width"] }
img = { role = "input",  dtype = "float32", shape = ["height", "width"] }
width  = { role = "scalar", dtype = "int32", value = "width" }
height = { role = "scalar", dtype = "int32", value = "height" }

[launch]
block = [16, 16]
grid = ["ceil_div(width, 16)", "ceil_div(height, 16)"]

[verify]
sizes = [{ height = 37, width = 53 }]
oracle = { out = "F.pad(torch.sqrt(F.conv2d(img[None, None], torch.tensor([[[[-1., 0., 1.], [-2., 0., 2.], [-1., 0., 1.]]]], device=img.device))[0, 0] ** 2 + F.conv2d(img[None, None], torch.tensor([[[[-1., -2., -1.], [0., 0., 0.], [1., 2., 1.]]]], device=img.device))[0, 0] ** 2), (1, 1, 1, 1))" }
reduction = "9"

[roofline]
flops = "20 * height * width"
*/
__global__ void sobel(float* out, const float* img, int width, int height)
{
    int x = blockIdx.x * blockDim.x + threadIdx.x;
    int y = blockIdx.y * blockDim.y + threadIdx.y;
    if (x >= width || y >= height) return;
    if (x == 0 || y == 0 || x == width - 1 || y == height - 1) {
        out[y * width + x] = 0.0f;
        return;
    }
    float gx = -img[(y - 1) * width + (x - 1)] + img[(y - 1) * width + (x + 1)]
               - 2.0f * img[y * width + (x - 1)] + 2.0f * img[y * width + (x + 1)]
               - img[(y + 1) * width + (x - 1)] + img[(y + 1) * width + (x + 1)];
    float gy = -img[(y - 1) * width + (x - 1)] - 2.0f * img[(y - 1) * width + x] - img[(y - 1) * width + (x + 1)]
               + img[(y + 1) * width + (x - 1)] + 2.0f * img[(y + 1) * width + x] + img[(y + 1) * width + (x + 1)];
    out[y * width + x] = sqrtf(gx * gx + gy * gy);
}
