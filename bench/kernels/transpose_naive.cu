// A naive out-of-place transpose: reads are coalesced, writes stride by `rows`.

/* cuda-agent
[sizes]
rows = 12288
cols = 8192    # 384 MiB in, 384 MiB out; not square, so rows and cols cannot be swapped silently

[args]
src  = { role = "input",  dtype = "float32", shape = ["rows", "cols"] }
dst  = { role = "output", dtype = "float32", shape = ["cols", "rows"] }
rows = { role = "scalar", dtype = "int32", value = "rows" }
cols = { role = "scalar", dtype = "int32", value = "cols" }

[launch]
block = [16, 16]
grid = ["ceil_div(cols, block.x)", "ceil_div(rows, block.y)"]

[verify]
sizes = [{ rows = 1000, cols = 777 }]
oracle = { dst = "src.T" }
*/
__global__ void transpose_naive(const float* src, float* dst, int rows, int cols)
{
    int col = blockIdx.x * blockDim.x + threadIdx.x;
    int row = blockIdx.y * blockDim.y + threadIdx.y;
    if (row < rows && col < cols) {
        dst[(size_t)col * rows + row] = src[(size_t)row * cols + col];
    }
}
