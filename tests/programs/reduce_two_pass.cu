// reduce_two_pass.cu: sum of 16M floats in two launches of one templated kernel: a fixed number of
// blocks each reduce a grid-stride slice into partial[blockIdx.x], then a single block reduces the
// partials. Shared memory is dynamic (threads * sizeof(T)), the tree is unrolled on the block size.
#include <cstdio>
#include <cstdlib>
#include <cmath>
#include <vector>
#include <cuda_runtime.h>

#define CUDA_CHECK(call)                                                                      \
    do {                                                                                      \
        cudaError_t _e = (call);                                                              \
        if (_e != cudaSuccess) {                                                              \
            fprintf(stderr, "CUDA error %s:%d: %s (%d)\n", __FILE__, __LINE__, cudaGetErrorString(_e), \
                    (int)_e);                                                                 \
            exit(1);                                                                          \
        }                                                                                     \
    } while (0)

// extern __shared__ cannot be declared twice with different types in one TU: route through int
template <class T>
struct DynamicSmem {
    __device__ T* get() {
        extern __shared__ int smem_raw_[];
        return reinterpret_cast<T*>(smem_raw_);
    }
};

template <class T, unsigned int blockSize>
__global__ void reduce_sum(const T* __restrict__ g_in, T* __restrict__ g_out, unsigned int n) {
    T* sdata = DynamicSmem<T>().get();
    const unsigned int tid = threadIdx.x;
    const unsigned int gridSize = blockSize * 2 * gridDim.x;
    unsigned int i = blockIdx.x * blockSize * 2 + tid;

    T sum = 0;
    while (i < n) {
        sum += g_in[i];
        if (i + blockSize < n) sum += g_in[i + blockSize];
        i += gridSize;
    }
    sdata[tid] = sum;
    __syncthreads();

    if (blockSize >= 1024 && tid < 512) { sdata[tid] = sum = sum + sdata[tid + 512]; } __syncthreads();
    if (blockSize >= 512 && tid < 256) { sdata[tid] = sum = sum + sdata[tid + 256]; } __syncthreads();
    if (blockSize >= 256 && tid < 128) { sdata[tid] = sum = sum + sdata[tid + 128]; } __syncthreads();
    if (blockSize >= 128 && tid < 64) { sdata[tid] = sum = sum + sdata[tid + 64]; } __syncthreads();

    if (tid < 32) {
        if (blockSize >= 64) sum += sdata[tid + 32];
        for (int offset = 16; offset > 0; offset >>= 1) sum += __shfl_down_sync(0xffffffff, sum, offset);
    }
    if (tid == 0) g_out[blockIdx.x] = sum;
}

int main() {
    const unsigned int n = 1 << 24;
    const int threads = 256;
    const int blocks = 1024;  // fixed: enough to fill the GPU, few enough for one block to finish
    const size_t smem = threads * sizeof(float);

    std::vector<float> h_in(n);
    double ref = 0.0;
    for (unsigned int i = 0; i < n; ++i) {
        h_in[i] = (float)(rand() % 100) / 100.0f;
        ref += h_in[i];
    }

    float *d_in, *d_partial, *d_out;
    CUDA_CHECK(cudaMalloc(&d_in, n * sizeof(float)));
    CUDA_CHECK(cudaMalloc(&d_partial, blocks * sizeof(float)));
    CUDA_CHECK(cudaMalloc(&d_out, sizeof(float)));
    CUDA_CHECK(cudaMemcpy(d_in, h_in.data(), n * sizeof(float), cudaMemcpyHostToDevice));

    // pass 1: n values -> blocks partial sums; pass 2: blocks partial sums -> 1
    reduce_sum<float, threads><<<blocks, threads, smem>>>(d_in, d_partial, n);
    CUDA_CHECK(cudaGetLastError());
    reduce_sum<float, threads><<<1, threads, smem>>>(d_partial, d_out, blocks);
    CUDA_CHECK(cudaGetLastError());

    float gpu = 0.0f;
    CUDA_CHECK(cudaMemcpy(&gpu, d_out, sizeof(float), cudaMemcpyDeviceToHost));
    printf("sum: gpu %.6f cpu %.6f rel err %.3e\n", gpu, ref, fabs(gpu - ref) / ref);

    CUDA_CHECK(cudaFree(d_in));
    CUDA_CHECK(cudaFree(d_partial));
    CUDA_CHECK(cudaFree(d_out));
    return 0;
}
