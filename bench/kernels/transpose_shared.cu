// A transpose through a shared-memory tile, already using __syncthreads, but the tile has no padding:
// reading a column of it hits one bank 32 times (a 32-way bank conflict on every store phase).

#define TILE 32

/* cuda-agent
[sizes]
rows = 12288
cols = 8192    # 384 MiB in, 384 MiB out

[args]
src  = { role = "input",  dtype = "float32", shape = ["rows", "cols"] }
dst  = { role = "output", dtype = "float32", shape = ["cols", "rows"] }
rows = { role = "scalar", dtype = "int32", value = "rows" }
cols = { role = "scalar", dtype = "int32", value = "cols" }

[launch]
block = [32, 32]   # one thread per tile element: the kernel assumes blockDim == (TILE, TILE)
grid = ["ceil_div(cols, 32)", "ceil_div(rows, 32)"]

[verify]
sizes = [{ rows = 1000, cols = 777 }]
oracle = { dst = "src.T" }
*/
__global__ void transpose_shared(const float* src, float* dst, int rows, int cols)
{
    __shared__ float tile[TILE][TILE];
    int col = blockIdx.x * TILE + threadIdx.x;
    int row = blockIdx.y * TILE + threadIdx.y;
    if (row < rows && col < cols) tile[threadIdx.y][threadIdx.x] = src[(size_t)row * cols + col];
    __syncthreads();
    // The block now writes the transposed tile: threads along x walk down a column of `tile`.
    int out_col = blockIdx.y * TILE + threadIdx.x;  // a row index of src
    int out_row = blockIdx.x * TILE + threadIdx.y;  // a column index of src
    if (out_row < cols && out_col < rows) dst[(size_t)out_row * rows + out_col] = tile[threadIdx.x][threadIdx.y];
}
