// index_select along rows (an embedding lookup from a table), one thread per output element, the flat
// index split into (row, column) in two steps and the row looked up in the int64 index tensor each
// time. Coalesced but scalar: 4-byte loads, an integer division and a dependent index load each.

/* cuda-agent
[sizes]
n = 131072         # looked-up rows: 256 MiB out
D = 512
V = 32000          # table rows: 62.5 MiB

[args]
table = { role = "input",  dtype = "float32", shape = ["V", "D"] }
index = { role = "input",  dtype = "int64",   shape = ["n"], init = { dist = "integers", low = 0, high = "V" } }
out   = { role = "output", dtype = "float32", shape = ["n", "D"] }
n = { role = "scalar", dtype = "int32", value = "n" }
D = { role = "scalar", dtype = "int32", value = "D" }

[launch]
block = [256]
grid = ["ceil_div(n * D, block.x)"]

[verify]
sizes = [{ n = 1001, D = 77, V = 333 }]
oracle = { out = "table.index_select(0, index)" }

[roofline]
# The output, the index, and the table rows the index hits (131072 draws from 32000 rows hit about
# 98% of them: 9/10 stays below). Counting the table once per output row would overstate the floor.
bytes = "4 * n * D + 8 * n + 4 * D * (min(V, n) * 9 // 10)"
*/
__global__ void index_select_rows(const float* table, const long long* index, float* out, int n, int D)
{
    int i = blockIdx.x * blockDim.x + threadIdx.x;
    if (i >= n * D) return;
    int row = i / D;
    int col = i % D;
    long long src = index[row];
    out[i] = table[src * D + col];
}
