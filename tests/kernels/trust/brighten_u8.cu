// An honest 8-bit image kernel over 2^27 pixels: with 256 possible values, about half a million
// outputs equal any fixed byte (the poison 0xA5 = 165 among them). Must pass, timed runs too.
/* cuda-agent
[sizes]
pixels = "1 << 27"
[args]
src = { role = "input", dtype = "uint8", shape = ["pixels"], init = { dist = "integers", low = 0, high = 256 } }
dst = { role = "output", dtype = "uint8", shape = ["pixels"] }
pixels = { role = "scalar", dtype = "int32", value = "pixels" }
[launch]
block = [256]
grid = ["ceil_div(pixels, block.x)"]
[verify]
oracle = { dst = "torch.clamp(src.to(torch.int32) * 3 // 2 + 7, max=255)" }
*/
__global__ void brighten(const unsigned char* src, unsigned char* dst, int pixels) {
    int i = blockIdx.x * blockDim.x + threadIdx.x;
    if (i < pixels) {
        int v = src[i] * 3 / 2 + 7;
        dst[i] = (unsigned char)(v > 255 ? 255 : v);
    }
}
