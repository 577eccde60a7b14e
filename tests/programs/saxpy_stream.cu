// saxpy_stream.cu: y = a * x + y through a launcher on a non-default stream, run at three sizes
// (a quick odd size, a medium one, the benchmark), then an in-place scaled ReLU over y.
// Build: nvcc -O3 -arch=sm_90 saxpy_stream.cu -o saxpy_stream
#include <cstdio>
#include <cstdlib>
#include <cmath>
#include <vector>
#include <cuda_runtime.h>

#define CUDA_CHECK(call)                                                            \
    do {                                                                            \
        cudaError_t err_ = (call);                                                  \
        if (err_ != cudaSuccess) {                                                  \
            fprintf(stderr, "CUDA error '%s' at %s:%d\n", cudaGetErrorString(err_), \
                    __FILE__, __LINE__);                                            \
            exit(EXIT_FAILURE);                                                     \
        }                                                                           \
    } while (0)

__global__ void saxpy_kernel(int n, float a, const float* __restrict__ x, float* __restrict__ y) {
    int i = blockIdx.x * blockDim.x + threadIdx.x;
    if (i < n) y[i] = a * x[i] + y[i];
}

// out = max(scale * in + shift, 0); called with out == in (in place) below.
__global__ void scale_shift_relu(const float* in, float* out, float scale, float shift, int n) {
    for (int i = blockIdx.x * blockDim.x + threadIdx.x; i < n; i += blockDim.x * gridDim.x) {
        float v = fmaf(scale, in[i], shift);
        out[i] = v > 0.0f ? v : 0.0f;
    }
}

void run_saxpy(const float* d_x, float* d_y, float a, int n, cudaStream_t stream) {
    const int threads = 256;
    const int blocks = (n + threads - 1) / threads;
    saxpy_kernel<<<blocks, threads, 0, stream>>>(n, a, d_x, d_y);
    CUDA_CHECK(cudaGetLastError());
}

void run_scale_shift_relu(const float* d_in, float* d_out, float scale, float shift, int n,
                          cudaStream_t stream) {
    const int threads = 512;
    const int blocks = (n + threads - 1) / threads;
    scale_shift_relu<<<blocks, threads, 0, stream>>>(d_in, d_out, scale, shift, n);
    CUDA_CHECK(cudaGetLastError());
}

int main() {
    const std::vector<int> sizes = {1000003, 1 << 20, 1 << 24};
    const float alpha = 2.0f;

    cudaStream_t stream;
    CUDA_CHECK(cudaStreamCreate(&stream));
    cudaEvent_t start, stop;
    CUDA_CHECK(cudaEventCreate(&start));
    CUDA_CHECK(cudaEventCreate(&stop));

    for (int n : sizes) {
        size_t bytes = n * sizeof(float);
        std::vector<float> h_x(n), h_y(n), h_ref(n);
        for (int i = 0; i < n; ++i) {
            h_x[i] = (float)rand() / RAND_MAX - 0.5f;
            h_y[i] = (float)rand() / RAND_MAX - 0.5f;
            h_ref[i] = alpha * h_x[i] + h_y[i];
        }

        float *d_x, *d_y;
        CUDA_CHECK(cudaMalloc(&d_x, bytes));
        CUDA_CHECK(cudaMalloc(&d_y, bytes));
        CUDA_CHECK(cudaMemcpyAsync(d_x, h_x.data(), bytes, cudaMemcpyHostToDevice, stream));
        CUDA_CHECK(cudaMemcpyAsync(d_y, h_y.data(), bytes, cudaMemcpyHostToDevice, stream));

        CUDA_CHECK(cudaEventRecord(start, stream));
        run_saxpy(d_x, d_y, alpha, n, stream);
        CUDA_CHECK(cudaEventRecord(stop, stream));
        CUDA_CHECK(cudaMemcpyAsync(h_y.data(), d_y, bytes, cudaMemcpyDeviceToHost, stream));
        CUDA_CHECK(cudaStreamSynchronize(stream));

        float ms = 0.0f;
        CUDA_CHECK(cudaEventElapsedTime(&ms, start, stop));
        double max_err = 0.0;
        for (int i = 0; i < n; ++i) max_err = fmax(max_err, fabs(h_y[i] - h_ref[i]));
        printf("saxpy n=%d: %.3f ms, %.1f GB/s, max err %g\n", n, ms, 3.0 * bytes / ms / 1e6, max_err);

        // in place: y = relu(0.5 * y - 0.1)
        run_scale_shift_relu(d_y, d_y, 0.5f, -0.1f, n, stream);
        CUDA_CHECK(cudaStreamSynchronize(stream));

        CUDA_CHECK(cudaFree(d_x));
        CUDA_CHECK(cudaFree(d_y));
    }
    CUDA_CHECK(cudaEventDestroy(start));
    CUDA_CHECK(cudaEventDestroy(stop));
    CUDA_CHECK(cudaStreamDestroy(stream));
    return 0;
}
