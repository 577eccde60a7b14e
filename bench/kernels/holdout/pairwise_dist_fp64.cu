// Euclidean distances between every row of x and every row of y in double precision, the textbook way:
// a 2-D grid of 16 x 16 blocks, one thread per output (i, j) looping over the D coordinates straight
// from global memory, j on the x index so that the stores of a warp are contiguous.

/* cuda-agent
[sizes]
N = 2048
M = 2048
D = 64             # 1 MiB each of x and y, 32 MiB of distances out

[args]
x   = { role = "input",  dtype = "float64", shape = ["N", "D"] }
y   = { role = "input",  dtype = "float64", shape = ["M", "D"] }
out = { role = "output", dtype = "float64", shape = ["N", "M"] }
N = { role = "scalar", dtype = "int32", value = "N" }
M = { role = "scalar", dtype = "int32", value = "M" }
D = { role = "scalar", dtype = "int32", value = "D" }

[launch]
block = [16, 16]
grid = ["ceil_div(M, block.x)", "ceil_div(N, block.y)"]

[verify]
sizes = [{ N = 77, M = 101, D = 13 }]
oracle = { out = "torch.cdist(x, y)" }
reduction = "D"

[roofline]
flops = "3 * N * M * D"
*/
__global__ void pairwise_dist(const double* x, const double* y, double* out, int N, int M, int D)
{
    int i = blockIdx.y * blockDim.y + threadIdx.y;   // row of x
    int j = blockIdx.x * blockDim.x + threadIdx.x;   // row of y

    if (i < N && j < M) {
        double sum = 0.0;
        for (int k = 0; k < D; k++) {
            double diff = x[i * D + k] - y[j * D + k];
            sum += diff * diff;
        }
        out[i * M + j] = sqrt(sum);
    }
}
