// A whole program: the kernel, its launch and a main that checks it.
#include <cstdio>
#include <cstdlib>
#include <vector>
#include <cuda_runtime.h>

#define CHECK(call)                                                       \
    do {                                                                  \
        cudaError_t err_ = (call);                                        \
        if (err_ != cudaSuccess) {                                        \
            std::fprintf(stderr, "%s\n", cudaGetErrorString(err_));       \
            std::exit(1);                                                 \
        }                                                                 \
    } while (0)

/* cuda-agent
[sizes]
rows = 4096
cols = 1024

[args]
out = { role = "inout", dtype = "float32", shape = ["rows", "cols"] }
bias = { role = "input", dtype = "float32", shape = ["cols"] }
rows = { role = "scalar", dtype = "int32", value = "rows" }
cols = { role = "scalar", dtype = "int32", value = "cols" }

[launch]
block = [16, 16]
grid = ["ceil_div(cols, block.x)", "ceil_div(rows, block.y)"]

[verify]
sizes = [{ rows = 33, cols = 70 }]
oracle = { out = "out + bias" }
*/
__global__ void add_bias(float* out, const float* bias, int rows, int cols)
{
    int c = blockIdx.x * blockDim.x + threadIdx.x;
    int r = blockIdx.y * blockDim.y + threadIdx.y;
    if (r < rows && c < cols) out[r * cols + c] += bias[c];
}

int main()
{
    const int rows = 4096, cols = 1024;
    std::vector<float> host(rows * cols, 1.0f), b(cols, 2.0f);
    float *out, *bias;
    CHECK(cudaMalloc(&out, host.size() * sizeof(float)));
    CHECK(cudaMalloc(&bias, b.size() * sizeof(float)));
    CHECK(cudaMemcpy(out, host.data(), host.size() * sizeof(float), cudaMemcpyHostToDevice));
    CHECK(cudaMemcpy(bias, b.data(), b.size() * sizeof(float), cudaMemcpyHostToDevice));
    dim3 block(16, 16), grid((cols + 15) / 16, (rows + 15) / 16);
    add_bias<<<grid, block>>>(out, bias, rows, cols);
    CHECK(cudaGetLastError());
    CHECK(cudaMemcpy(host.data(), out, host.size() * sizeof(float), cudaMemcpyDeviceToHost));
    std::printf("%f\n", host[0]);
    return 0;
}
