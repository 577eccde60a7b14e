// Per-row sums from a PyTorch C++/CUDA extension: 64-bit packed accessors, one thread per row walking
// it with `x.size(1)` as its bound (each thread reads its own 16 KiB row: neighbouring threads 16 KiB
// apart).
#include <torch/extension.h>

/* cuda-agent
[sizes]
rows = 32768
cols = 4096       # 512 MiB of float32 in

[args]
x    = { role = "input",  dtype = "float32", shape = ["rows", "cols"] }
sums = { role = "output", dtype = "float32", shape = ["rows"] }

[launch]
block = [256]
grid = ["ceil_div(rows, block.x)"]

[verify]
sizes = [{ rows = 37, cols = 1001 }]
oracle = { sums = "x.sum(dim=1)" }
reduction = "cols"
*/
__global__ void row_sums_kernel(const at::PackedTensorAccessor64<float, 2, at::RestrictPtrTraits> x,
                                at::PackedTensorAccessor64<float, 1, at::RestrictPtrTraits> sums) {
    const int64_t row = blockIdx.x * blockDim.x + threadIdx.x;
    if (row >= x.size(0)) return;
    float s = 0.f;
    for (int64_t j = 0; j < x.size(1); ++j) {
        s += x[row][j];
    }
    sums[row] = s;
}
