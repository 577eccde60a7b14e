// A spec whose only size is written as an expression, with no [verify] sizes: the verifier must still
// derive a smaller odd size from it (n = (1 << 26) / 3 | 1) and run every candidate there too.
/* cuda-agent
[sizes]
n = "1 << 26"
[args]
x = { role = "input", dtype = "float32", shape = ["n"] }
y = { role = "output", dtype = "float32", shape = ["n"] }
n = { role = "scalar", dtype = "int32", value = "n" }
[launch]
block = [256]
grid = ["ceil_div(n, block.x)"]
[verify]
oracle = { y = "2 * x + 1" }
*/
__global__ void affine(const float* x, float* y, int n) {
    int i = blockIdx.x * blockDim.x + threadIdx.x;
    if (i < n) y[i] = 2.0f * x[i] + 1.0f;
}
