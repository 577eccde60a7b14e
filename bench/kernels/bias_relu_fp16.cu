// Fused bias + ReLU on a half-precision activation matrix, one thread per element (2-D grid).
#include <cuda_fp16.h>

/* cuda-agent
[sizes]
rows = 16384
cols = 8192    # 256 MiB of float16 in, 256 MiB out

[args]
x    = { role = "input",  dtype = "float16", shape = ["rows", "cols"] }
bias = { role = "input",  dtype = "float16", shape = ["cols"] }
y    = { role = "output", dtype = "float16", shape = ["rows", "cols"] }
rows = { role = "scalar", dtype = "int32", value = "rows" }
cols = { role = "scalar", dtype = "int32", value = "cols" }

[launch]
block = [32, 8]
grid = ["ceil_div(cols, block.x)", "ceil_div(rows, block.y)"]

[verify]
sizes = [{ rows = 333, cols = 1001 }, { rows = 7, cols = 1024 }]   # an odd width, and a narrow multiple of 8
oracle = { y = "torch.relu(x + bias)" }

[roofline]
flops = "2 * rows * cols"
*/
__global__ void bias_relu(const half* x, const half* bias, half* y, int rows, int cols)
{
    int col = blockIdx.x * blockDim.x + threadIdx.x;
    int row = blockIdx.y * blockDim.y + threadIdx.y;
    if (row < rows && col < cols) {
        float v = __half2float(x[row * cols + col]) + __half2float(bias[col]);
        y[row * cols + col] = __float2half(v > 0.0f ? v : 0.0f);
    }
}
