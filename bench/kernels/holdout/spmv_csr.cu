// A sparse matrix-vector product in CSR form, the "scalar" kernel every sparse-format tutorial starts
// from: one thread per row walking its entries between two row pointers. Rows hold 16 to 112 entries
// (64 on average): neighbouring threads start their walks rows apart, so each load of a warp touches 32
// cache lines, and x is gathered at random columns.

/* cuda-agent
[sizes]
rows = 262144
max_row = 112      # rows of 16 to 112 entries: at most 112 MiB of values and column indices

[args]
row_ptr = { role = "input",  dtype = "int32",   shape = ["rows + 1"], init = { dist = "offsets", low = "max_row // 7", high = "max_row + 1" } }
col_idx = { role = "input",  dtype = "int32",   shape = ["rows * max_row"], init = { dist = "integers", low = 0, high = "rows" } }
values  = { role = "input",  dtype = "float32", shape = ["rows * max_row"] }
x       = { role = "input",  dtype = "float32", shape = ["rows"] }
y       = { role = "output", dtype = "float32", shape = ["rows"] }
num_rows = { role = "scalar", dtype = "int32", value = "rows" }

[launch]
block = [256]
grid = ["ceil_div(rows, block.x)"]

[verify]
sizes = [{ rows = 1001, max_row = 9 }]
# each entry's product added into its row: the row of entry e is the r with row_ptr[r] <= e < row_ptr[r + 1]
oracle = { y = "torch.zeros_like(x).index_add(0, torch.repeat_interleave(torch.arange(rows), torch.diff(row_ptr)), values[:row_ptr[-1]] * x[col_idx[:row_ptr[-1]].long()])" }
reduction = "max_row"

[roofline]
bytes = "8 * rows * 64 + 12 * rows"
flops = "2 * rows * 64"
*/
__global__ void spmv_csr_scalar(const int* row_ptr, const int* col_idx, const float* values, const float* x,
                                float* y, int num_rows)
{
    int row = blockDim.x * blockIdx.x + threadIdx.x;
    if (row < num_rows) {
        float dot = 0;
        int row_start = row_ptr[row];
        int row_end = row_ptr[row + 1];
        for (int jj = row_start; jj < row_end; jj++)
            dot += values[jj] * x[col_idx[jj]];
        y[row] = dot;
    }
}
