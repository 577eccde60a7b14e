// A sparse matrix-vector product in ELLPACK form (every row padded to K nonzeros, stored row by row),
// the "scalar" kernel of the sparse-format papers: one thread per row walking its K entries. Neighbouring
// threads read K entries apart, and x is gathered at random columns.

/* cuda-agent
[sizes]
rows = 1048576
K = 32             # 128 MiB of values, 128 MiB of column indices
ncols = 1048576

[args]
cols = { role = "input",  dtype = "int32",   shape = ["rows", "K"], init = { dist = "integers", low = 0, high = "ncols" } }
vals = { role = "input",  dtype = "float32", shape = ["rows", "K"] }
x    = { role = "input",  dtype = "float32", shape = ["ncols"] }
y    = { role = "output", dtype = "float32", shape = ["rows"] }
num_rows = { role = "scalar", dtype = "int32", value = "rows" }
K = { role = "scalar", dtype = "int32", value = "K" }

[launch]
block = [128]
grid = ["ceil_div(rows, block.x)"]

[verify]
sizes = [{ rows = 1001, K = 7, ncols = 333 }]
oracle = { y = "(vals * x[cols.long()]).sum(1)" }
reduction = "K"

[roofline]
bytes = "8 * rows * K + 4 * rows + 4 * ncols"
flops = "2 * rows * K"
*/
__global__ void spmv_ell(const int* cols, const float* vals, const float* x, float* y, int num_rows, int K)
{
    int row = blockIdx.x * blockDim.x + threadIdx.x;
    if (row < num_rows) {
        float dot = 0;
        for (int k = 0; k < K; k++) {
            int col = cols[row * K + k];
            float val = vals[row * K + k];
            dot += val * x[col];
        }
        y[row] = dot;
    }
}
