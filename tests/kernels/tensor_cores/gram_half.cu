// A Gram matrix G = X^T X of half-precision samples, in the style of a statistics extension: X is
// (n samples, d features) row-major, one thread per (i, j) pair of features walking down both columns;
// the sum is in float and G is kept in float.
#include <cuda_fp16.h>

/* cuda-agent
[sizes]
n = 4096
d = 1024

[args]
G = { role = "output", dtype = "float32", shape = ["d", "d"] }
X = { role = "input", dtype = "float16", shape = ["n", "d"] }
n = { role = "scalar", dtype = "int32", value = "n" }
d = { role = "scalar", dtype = "int32", value = "d" }

[launch]
block = [32, 8]
grid = ["ceil_div(d, block.x)", "ceil_div(d, block.y)"]

[verify]
sizes = [{ n = 100, d = 77 }]
oracle = { G = "X.float().T @ X.float()" }
reduction = "n"
*/
__global__ void gram_half(float* G, const half* X, int n, int d)
{
    int j = blockIdx.x * blockDim.x + threadIdx.x;
    int i = blockIdx.y * blockDim.y + threadIdx.y;
    if (i < d && j < d) {
        float acc = 0.f;
        for (int s = 0; s < n; ++s)
            acc += (float)X[s * d + i] * (float)X[s * d + j];
        G[i * d + j] = acc;
    }
}
