// A 256-bin histogram with one global atomic per input element: all threads contend for 256 addresses.

/* cuda-agent
[sizes]
n = "1 << 26"   # 256 MiB of int32
bins = 256

[args]
values = { role = "input", dtype = "int32", shape = ["n"], init = { dist = "integers", low = 0, high = "bins" } }
counts = { role = "inout", dtype = "int32", shape = ["bins"], init = "zeros" }
n      = { role = "scalar", dtype = "int32", value = "n" }

[launch]
block = [256]
grid = ["ceil_div(n, block.x)"]

[verify]
sizes = [{ n = 1_000_003 }]
oracle = { counts = "counts + torch.bincount(values.long(), minlength=bins).int()" }
*/
__global__ void histogram(const int* values, int* counts, int n)
{
    int i = blockIdx.x * blockDim.x + threadIdx.x;
    if (i < n) {
        atomicAdd(&counts[values[i]], 1);
    }
}
