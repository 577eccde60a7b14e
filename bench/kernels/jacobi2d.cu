// One 5-point Jacobi sweep on a 2-D grid with zero values outside it: each output is the mean of its
// four neighbours, every input element read four times from global memory.

/* cuda-agent
[sizes]
rows = 8192
cols = 8192    # 256 MiB in, 256 MiB out

[args]
u    = { role = "input",  dtype = "float32", shape = ["rows", "cols"] }
out  = { role = "output", dtype = "float32", shape = ["rows", "cols"] }
rows = { role = "scalar", dtype = "int32", value = "rows" }
cols = { role = "scalar", dtype = "int32", value = "cols" }

[launch]
block = [32, 8]
grid = ["ceil_div(cols, block.x)", "ceil_div(rows, block.y)"]

[verify]
sizes = [{ rows = 333, cols = 1001 }]
# Each neighbour as the grid shifted by one with a zero row or column padded in.
oracle = { out = "0.25 * (F.pad(u, (0, 0, 1, 0))[:-1] + F.pad(u, (0, 0, 0, 1))[1:] + F.pad(u, (1, 0))[:, :-1] + F.pad(u, (0, 1))[:, 1:])" }

[roofline]
flops = "4 * rows * cols"
*/
__global__ void jacobi2d(const float* u, float* out, int rows, int cols)
{
    int col = blockIdx.x * blockDim.x + threadIdx.x;
    int row = blockIdx.y * blockDim.y + threadIdx.y;
    if (row < rows && col < cols) {
        float up    = row > 0        ? u[(row - 1) * cols + col] : 0.0f;
        float down  = row < rows - 1 ? u[(row + 1) * cols + col] : 0.0f;
        float left  = col > 0        ? u[row * cols + col - 1]   : 0.0f;
        float right = col < cols - 1 ? u[row * cols + col + 1]   : 0.0f;
        out[row * cols + col] = 0.25f * (up + down + left + right);
    }
}
