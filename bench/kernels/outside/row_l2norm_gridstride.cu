// Rows scaled to unit L2 norm, written the way grid-stride code is: one thread per row inside a loop
// over the rows, launched on a fixed number of blocks (a few per SM) whatever the row count, each row
// walked twice (the sum of squares, then the scaled copy) with the row 4 KiB from its neighbour's.

/* cuda-agent
[sizes]
rows = 65536
cols = 1024        # 256 MiB in, 256 MiB out

[args]
x = { role = "input",  dtype = "float32", shape = ["rows", "cols"] }
y = { role = "output", dtype = "float32", shape = ["rows", "cols"] }
rows = { role = "scalar", dtype = "int32", value = "rows" }
cols = { role = "scalar", dtype = "int32", value = "cols" }
eps = { role = "scalar", dtype = "float32", value = 1e-12 }

[launch]
block = [256]
grid = [528]       # 132 SMs x 4 blocks, as `numSMs * 4` host code launches it

[verify]
sizes = [{ rows = 333, cols = 1001 }]
oracle = { y = "x / torch.sqrt((x * x).sum(-1, keepdim=True) + eps)" }
reduction = "cols"

[roofline]
flops = "4 * rows * cols"
*/
__global__ void row_l2norm(const float* x, float* y, int rows, int cols, float eps)
{
    for (int r = blockIdx.x * blockDim.x + threadIdx.x; r < rows; r += blockDim.x * gridDim.x) {
        const float* in = x + (size_t)r * cols;
        float* out = y + (size_t)r * cols;
        float ss = 0.0f;
        for (int c = 0; c < cols; ++c)
            ss += in[c] * in[c];
        const float scale = rsqrtf(ss + eps);
        for (int c = 0; c < cols; ++c)
            out[c] = in[c] * scale;
    }
}
