// Greedy decoding's argmax over a vocabulary, one thread per row: a first pass finds the largest logit,
// a second pass scans the row again for its first position. 2048 threads walk 32000 floats each, rows
// 125 KiB apart: a few warps per SM, each load its own transaction.

/* cuda-agent
[sizes]
rows = 2048
cols = 32000       # 250 MiB of logits

[args]
logits = { role = "input",  dtype = "float32", shape = ["rows", "cols"] }
out    = { role = "output", dtype = "int64",   shape = ["rows"] }
rows   = { role = "scalar", dtype = "int32", value = "rows" }
cols   = { role = "scalar", dtype = "int32", value = "cols" }

[launch]
block = [128]
grid = ["ceil_div(rows, block.x)"]

[verify]
sizes = [{ rows = 37, cols = 1001 }]
oracle = { out = "logits.argmax(dim=1)" }   # the first index of the maximum, as the kernel's second pass
*/
__device__ float row_max(const float* row, int n)
{
    float best = -INFINITY;
    for (int i = 0; i < n; i++) best = fmaxf(best, row[i]);
    return best;
}

__global__ void row_argmax(const float* logits, long long* out, int rows, int cols)
{
    int r = blockIdx.x * blockDim.x + threadIdx.x;
    if (r > rows - 1) return;

    const float* x_row = logits + (size_t)r * cols;
    float best = row_max(x_row, cols);

    long long index = 0;
    for (int c = 0; c < cols; c++) {
        if (x_row[c] == best) {
            index = c;
            break;
        }
    }
    out[r] = index;
}
