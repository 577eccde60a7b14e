// containers_gemv.cu: y = A x in double precision with host buffers in std::vector, then a ReLU backward
// pass on buffers held in thrust::device_vector: modern C++ CUDA code that never writes a bare malloc.
#include <cstdio>
#include <vector>
#include <cuda_runtime.h>
#include <thrust/device_vector.h>

#define CUDA_CHECK(expr)                                                                        \
    do {                                                                                        \
        cudaError_t status_ = (expr);                                                           \
        if (status_ != cudaSuccess) {                                                           \
            std::fprintf(stderr, "%s:%d: %s\n", __FILE__, __LINE__, cudaGetErrorString(status_)); \
            return 1;                                                                           \
        }                                                                                       \
    } while (0)

__global__ void gemv_rows(const double* A, const double* x, double* y, int rows, int cols)
{
    int r = blockIdx.x * blockDim.x + threadIdx.x;
    if (r < rows) {
        double acc = 0.0;
        for (int c = 0; c < cols; ++c) acc += A[r * cols + c] * x[c];
        y[r] = acc;
    }
}

__global__ void relu_backward(const float* __restrict__ grad_out, const float* __restrict__ x,
                              float* __restrict__ grad_in, size_t n)
{
    size_t i = blockIdx.x * (size_t)blockDim.x + threadIdx.x;
    if (i < n) grad_in[i] = x[i] > 0.f ? grad_out[i] : 0.f;
}

int main()
{
    const int rows = 3000, cols = 2048;
    std::vector<double> hA(rows * cols, 0.5), hx(cols, 2.0), hy(rows);
    double *dA, *dx, *dy;
    CUDA_CHECK(cudaMalloc(&dA, hA.size() * sizeof(double)));
    CUDA_CHECK(cudaMalloc(&dx, hx.size() * sizeof(double)));
    CUDA_CHECK(cudaMalloc(&dy, hy.size() * sizeof(double)));
    CUDA_CHECK(cudaMemcpy(dA, hA.data(), hA.size() * sizeof(double), cudaMemcpyHostToDevice));
    CUDA_CHECK(cudaMemcpy(dx, hx.data(), hx.size() * sizeof(double), cudaMemcpyHostToDevice));
    dim3 block(128);
    dim3 grid((rows + block.x - 1) / block.x);
    gemv_rows<<<grid, block>>>(dA, dx, dy, rows, cols);
    CUDA_CHECK(cudaMemcpy(hy.data(), dy, hy.size() * sizeof(double), cudaMemcpyDeviceToHost));

    const size_t n = 10000000;
    thrust::device_vector<float> grad(n, 1.0f), act(n, 0.5f), grad_in(n);
    const int threads = 512;
    const int blocks = static_cast<int>((n + threads - 1) / threads);
    relu_backward<<<blocks, threads>>>(thrust::raw_pointer_cast(grad.data()), thrust::raw_pointer_cast(act.data()),
                                       thrust::raw_pointer_cast(&grad_in[0]), n);
    CUDA_CHECK(cudaDeviceSynchronize());
    std::printf("%f %f\n", hy[0], (float)grad_in[0]);
    cudaFree(dA);
    cudaFree(dx);
    cudaFree(dy);
    return 0;
}
