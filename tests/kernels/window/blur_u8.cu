// The image course's box blur: a thread per pixel averaging a (2R+1)^2 patch of 8-bit pixels, skipping
// those off the image (the patch's pixel count divides).
#define BLUR_SIZE 2
/* cuda-agent
[sizes]
h = 4096
w = 4096
[args]
in = { role = "input", dtype = "uint8", shape = ["h", "w"], init = { dist = "integers", low = 0, high = 256 } }
out = { role = "output", dtype = "uint8", shape = ["h", "w"] }
w = { role = "scalar", dtype = "int32", value = "w" }
h = { role = "scalar", dtype = "int32", value = "h" }
[launch]
block = [16, 16]
grid = ["ceil_div(w, 16)", "ceil_div(h, 16)"]
[verify]
sizes = [{ h = 37, w = 53 }]
oracle = { out = "(F.avg_pool2d(in_.float()[None, None], 5, 1, 2, count_include_pad=False)[0, 0]).to(torch.uint8)" }
tolerance = { atol = 1, rtol = 0 }
*/
__global__ void blurKernel(unsigned char* in, unsigned char* out, int w, int h)
{
    int Col = blockIdx.x * blockDim.x + threadIdx.x;
    int Row = blockIdx.y * blockDim.y + threadIdx.y;
    if (Col < w && Row < h) {
        int pixVal = 0;
        int pixels = 0;
        for (int blurRow = -BLUR_SIZE; blurRow < BLUR_SIZE + 1; ++blurRow) {
            for (int blurCol = -BLUR_SIZE; blurCol < BLUR_SIZE + 1; ++blurCol) {
                int curRow = Row + blurRow;
                int curCol = Col + blurCol;
                if (curRow > -1 && curRow < h && curCol > -1 && curCol < w) {
                    pixVal += in[curRow * w + curCol];
                    pixels++;
                }
            }
        }
        out[Row * w + Col] = (unsigned char)(pixVal / pixels);
    }
}
