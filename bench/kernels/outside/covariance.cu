// PolyBench's covariance, the last of its three GPU kernels: the column means come from an earlier
// kernel, and each thread of a 16x16 block computes one (j1, j2) pair with j2 >= j1, a walk down all
// N rows of both columns, then writes the entry and its mirror. Half the threads have nothing to do,
// and the mirrored store goes down a column.

/* cuda-agent
[sizes]
M = 2048           # variables (columns)
N = 2048           # observations (rows): 16 MiB in, 16 MiB out, 8.6 GFLOP

[args]
data    = { role = "input",  dtype = "float32", shape = ["N", "M"] }
mean    = { role = "input",  dtype = "float32", shape = ["M"] }
symmat  = { role = "output", dtype = "float32", shape = ["M", "M"] }
float_n = { role = "scalar", dtype = "float32", value = "N" }
m = { role = "scalar", dtype = "int32", value = "M" }
n = { role = "scalar", dtype = "int32", value = "N" }

[launch]
block = [16, 16]
grid = ["ceil_div(M, block.x)", "ceil_div(M, block.y)"]

[verify]
sizes = [{ M = 77, N = 131 }]
oracle = { symmat = "(centered.T @ centered) / (N - 1)" }
reduction = "N"

[verify.intermediates]
centered = "data - mean"

[roofline]
flops = "M * (M + 1) * N * 2"   # 4 flops a row for each of the M * (M + 1) / 2 pairs
*/
__global__ void covariance(const float* data, const float* mean, float* symmat, float float_n, int m, int n)
{
    int j2 = blockIdx.x * blockDim.x + threadIdx.x;
    int j1 = blockIdx.y * blockDim.y + threadIdx.y;

    if (j1 < m && j2 < m && j2 >= j1) {
        float cov = 0.0f;
        for (int i = 0; i < n; i++) {
            cov += (data[i * m + j1] - mean[j1]) * (data[i * m + j2] - mean[j2]);
        }
        cov /= float_n - 1.0f;
        symmat[j1 * m + j2] = cov;
        symmat[j2 * m + j1] = cov;
    }
}
