// Row-wise L2 normalisation y = x / max(||x_row||, eps) (F.normalize's rule), the naive 2-D draft: one
// thread per element of a 2-D grid, and every thread recomputes its whole row's norm itself before
// dividing its one element, so each row is read cols times over.

/* cuda-agent
[sizes]
rows = 32768
cols = 256         # 32 MiB in, 32 MiB out

[args]
x = { role = "input",  dtype = "float32", shape = ["rows", "cols"] }
y = { role = "output", dtype = "float32", shape = ["rows", "cols"] }
rows = { role = "scalar", dtype = "int32", value = "rows" }
cols = { role = "scalar", dtype = "int32", value = "cols" }
eps  = { role = "scalar", dtype = "float32", value = 1e-12 }

[launch]
block = [16, 16]
grid = ["ceil_div(cols, block.x)", "ceil_div(rows, block.y)"]

[verify]
sizes = [{ rows = 101, cols = 77 }, { rows = 5, cols = 1 }]
oracle = { y = "F.normalize(x, p=2.0, dim=1, eps=eps)" }
reduction = "cols"

[roofline]
flops = "2 * rows * cols * cols + rows * cols"
*/
__global__ void l2_normalize(const float* x, float* y, int rows, int cols, float eps)
{
    int col = blockIdx.x * blockDim.x + threadIdx.x;
    int row = blockIdx.y * blockDim.y + threadIdx.y;

    if (row < rows && col < cols) {
        float sum_sq = 0.0f;
        for (int j = 0; j < cols; j++) {
            float v = x[row * cols + j];
            sum_sq += v * v;
        }
        float norm = sqrtf(sum_sq);
        if (norm < eps) norm = eps;
        y[row * cols + col] = x[row * cols + col] / norm;
    }
}
