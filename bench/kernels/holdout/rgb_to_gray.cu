// The image course's first exercise: interleaved 8-bit RGB to grey with the luminosity weights, one
// thread per pixel of a 2-D grid, three byte loads a pixel three bytes apart.

#define CHANNELS 3

/* cuda-agent
[sizes]
height = 4096
width = 4096       # 48 MiB of RGB

[args]
gray = { role = "output", dtype = "uint8", shape = ["height", "width"] }
rgb  = { role = "input",  dtype = "uint8", shape = ["height", "width", 3], init = { dist = "integers", low = 0, high = 256 } }
width  = { role = "scalar", dtype = "int32", value = "width" }
height = { role = "scalar", dtype = "int32", value = "height" }

[launch]
block = [16, 16]
grid = ["ceil_div(width, 16)", "ceil_div(height, 16)"]

[verify]
sizes = [{ height = 77, width = 101 }]
oracle = { gray = "(0.21 * rgb[..., 0].float() + 0.71 * rgb[..., 1].float() + 0.07 * rgb[..., 2].float()).to(torch.uint8)" }
tolerance = { atol = 1, rtol = 0 }   # the weights' float rounding can move a value across an integer

[roofline]
flops = "5 * height * width"
*/
__global__ void colorToGreyscale(unsigned char* gray, const unsigned char* rgb, int width, int height)
{
    int col = blockIdx.x * blockDim.x + threadIdx.x;
    int row = blockIdx.y * blockDim.y + threadIdx.y;
    if (col < width && row < height) {
        int grayOffset = row * width + col;
        int rgbOffset = grayOffset * CHANNELS;
        unsigned char r = rgb[rgbOffset];
        unsigned char g = rgb[rgbOffset + 1];
        unsigned char b = rgb[rgbOffset + 2];
        gray[grayOffset] = 0.21f * r + 0.71f * g + 0.07f * b;
    }
}
