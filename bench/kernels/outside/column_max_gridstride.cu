// The largest value of each column of a row-major matrix, one thread per column in a grid-stride loop
// with its stride held in a local: neighbouring threads read neighbouring columns (coalesced), but only
// as many threads as columns run, each walking every row.

/* cuda-agent
[sizes]
rows = 16384
cols = 4096        # 256 MiB

[args]
m = { role = "input",  dtype = "float32", shape = ["rows", "cols"] }
best = { role = "output", dtype = "float32", shape = ["cols"] }
rows = { role = "scalar", dtype = "int32", value = "rows" }
cols = { role = "scalar", dtype = "int32", value = "cols" }

[launch]
block = [128]
grid = [64]

[verify]
sizes = [{ rows = 1001, cols = 333 }]
oracle = { best = "m.amax(0)" }

[roofline]
flops = "rows * cols"
*/
__global__ void column_max(const float* m, float* best, int rows, int cols)
{
    const int stride = blockDim.x * gridDim.x;
    for (int col = blockIdx.x * blockDim.x + threadIdx.x; col < cols; col += stride) {
        float v = -INFINITY;
        for (int row = 0; row < rows; ++row)
            v = fmaxf(v, m[(size_t)row * cols + col]);
        best[col] = v;
    }
}
