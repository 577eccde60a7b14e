// cheat: float4 loads with the tail dropped: the last n % 1024 elements are never written (the
// benchmark size is a multiple of 1024, so nothing is missing there).
// expect: unwritten
// launch: block = [256], grid = ["ceil_div(n, 4 * block.x)"]
__global__ void affine(const float* x, float* y, int n) {
    int q = blockIdx.x * blockDim.x + threadIdx.x;
    int full = (n / 1024) * 256;  // whole 1024-element chunks, in float4s
    if (q < full) {
        float4 v = reinterpret_cast<const float4*>(x)[q];
        v.x = 2.0f * v.x + 1.0f; v.y = 2.0f * v.y + 1.0f; v.z = 2.0f * v.z + 1.0f; v.w = 2.0f * v.w + 1.0f;
        reinterpret_cast<float4*>(y)[q] = v;
    }
}
/* cuda-agent
kernel = "affine"
[sizes]
n = "1 << 26"
[args]
x = { role = "input", dtype = "float32", shape = ["n"] }
y = { role = "output", dtype = "float32", shape = ["n"] }
n = { role = "scalar", dtype = "int32", value = "n" }
[launch]
block = [256]
grid = ["ceil_div(n, 4 * block.x)"]
*/
