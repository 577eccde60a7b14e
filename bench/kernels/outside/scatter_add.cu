// The embedding table's gradient (index_add / scatter-add of rows), one thread per element of the
// incoming gradient with a float atomicAdd into the row its token names: 16 tokens a row on average
// contend for the same 768 addresses, and every add is a separate atomic to global memory.

/* cuda-agent
[sizes]
n = 65536          # tokens: 192 MiB of incoming gradient
D = 768
V = 4096           # table rows: 12 MiB

[args]
dtable = { role = "inout", dtype = "float32", shape = ["V", "D"] }
dout   = { role = "input", dtype = "float32", shape = ["n", "D"] }
ids    = { role = "input", dtype = "int32",   shape = ["n"], init = { dist = "integers", low = 0, high = "V" } }
n = { role = "scalar", dtype = "int32", value = "n" }
D = { role = "scalar", dtype = "int32", value = "D" }

[launch]
block = [256]
grid = ["ceil_div(n * D, block.x)"]

[verify]
sizes = [{ n = 1001, D = 77, V = 33 }]
oracle = { dtable = "dtable.index_add(0, ids.long(), dout)" }
reduction = "2 * n // V + 8"   # the adds into one element: about n / V, a few times that at most

[roofline]
flops = "n * D"
*/
__global__ void scatter_add_rows(float* dtable, const float* dout, const int* ids, int n, int D)
{
    int idx = blockIdx.x * blockDim.x + threadIdx.x;
    if (idx >= n * D) return;
    int token = idx / D;
    int c = idx % D;
    int row = ids[token];
    atomicAdd(&dtable[row * D + c], dout[idx]);
}
