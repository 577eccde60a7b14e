// Row sums of a matrix, one thread per row.

/* cuda-agent
[sizes]
rows = 65536
cols = 1024    # 256 MiB in

[args]
x    = { role = "input",  dtype = "float32", shape = ["rows", "cols"] }
out  = { role = "output", dtype = "float32", shape = ["rows"] }
rows = { role = "scalar", dtype = "int32", value = "rows" }
cols = { role = "scalar", dtype = "int32", value = "cols" }

[launch]
block = [256]
grid = ["ceil_div(rows, block.x)"]

[verify]
sizes = [{ rows = 333, cols = 999 }]
oracle = { out = "x.sum(dim=1)" }
reduction = "cols"

[roofline]
flops = "rows * cols"
*/
__global__ void row_sum(const float* x, float* out, int rows, int cols)
{
    int row = blockIdx.x * blockDim.x + threadIdx.x;
    if (row < rows) {
        float acc = 0.0f;
        for (int c = 0; c < cols; ++c) acc += x[(size_t)row * cols + c];
        out[row] = acc;
    }
}
