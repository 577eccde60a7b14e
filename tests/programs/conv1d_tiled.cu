// conv1d_tiled.cu: 1-D convolution with a (2 * RADIUS + 1)-tap mask, tiled: each block stages its
// tile plus RADIUS halo cells on each side in dynamic shared memory; cells outside the signal are
// ghost zeros (same-size output, zero padding). Names follow the textbook: N in, M mask, P out.
#include <cstdio>
#include <cstdlib>
#include <cmath>
#include <cuda_runtime.h>

#define RADIUS 4
#define MASK_WIDTH (2 * RADIUS + 1)

#define gpuErrchk(ans) { gpuAssert((ans), __FILE__, __LINE__); }
inline void gpuAssert(cudaError_t code, const char* file, int line, bool abort = true) {
    if (code != cudaSuccess) {
        fprintf(stderr, "GPUassert: %s %s %d\n", cudaGetErrorString(code), file, line);
        if (abort) exit(code);
    }
}

// dynamic shared memory: (blockDim.x + 2 * RADIUS) floats
__global__ void convolution_1D_tiled(const float* __restrict__ N, const float* __restrict__ M,
                                     float* __restrict__ P, int Width) {
    extern __shared__ float N_ds[];
    const int i = blockIdx.x * blockDim.x + threadIdx.x;

    // left halo: the last RADIUS threads load the cells before this tile
    int halo_left = (blockIdx.x - 1) * blockDim.x + threadIdx.x;
    if (threadIdx.x >= blockDim.x - RADIUS) N_ds[threadIdx.x - (blockDim.x - RADIUS)] = halo_left < 0 ? 0.0f : N[halo_left];
    // the tile itself
    N_ds[RADIUS + threadIdx.x] = i < Width ? N[i] : 0.0f;
    // right halo: the first RADIUS threads load the cells after this tile
    int halo_right = (blockIdx.x + 1) * blockDim.x + threadIdx.x;
    if (threadIdx.x < RADIUS) N_ds[RADIUS + blockDim.x + threadIdx.x] = halo_right >= Width ? 0.0f : N[halo_right];
    __syncthreads();

    if (i < Width) {
        float Pvalue = 0.0f;
#pragma unroll
        for (int j = 0; j < MASK_WIDTH; j++) Pvalue += N_ds[threadIdx.x + j] * M[j];
        P[i] = Pvalue;
    }
}

int main() {
    const int width = 1 << 24;
    const int threads = 256;
    const size_t bytes = width * sizeof(float);

    float* h_N = (float*)malloc(bytes);
    float* h_P = (float*)malloc(bytes);
    float h_M[MASK_WIDTH];
    for (int i = 0; i < width; i++) h_N[i] = sinf(i * 0.001f) + 0.1f * ((float)rand() / RAND_MAX);
    float msum = 0.0f;
    for (int j = 0; j < MASK_WIDTH; j++) {
        h_M[j] = expf(-0.5f * (j - RADIUS) * (j - RADIUS) / 4.0f);  // gaussian, sigma 2
        msum += h_M[j];
    }
    for (int j = 0; j < MASK_WIDTH; j++) h_M[j] /= msum;

    float *d_N, *d_M, *d_P;
    gpuErrchk(cudaMalloc(&d_N, bytes));
    gpuErrchk(cudaMalloc(&d_M, MASK_WIDTH * sizeof(float)));
    gpuErrchk(cudaMalloc(&d_P, bytes));
    gpuErrchk(cudaMemcpy(d_N, h_N, bytes, cudaMemcpyHostToDevice));
    gpuErrchk(cudaMemcpy(d_M, h_M, MASK_WIDTH * sizeof(float), cudaMemcpyHostToDevice));

    const int blocks = (width + threads - 1) / threads;
    const size_t shmem = (threads + 2 * RADIUS) * sizeof(float);
    convolution_1D_tiled<<<blocks, threads, shmem>>>(d_N, d_M, d_P, width);
    gpuErrchk(cudaPeekAtLastError());
    gpuErrchk(cudaDeviceSynchronize());
    gpuErrchk(cudaMemcpy(h_P, d_P, bytes, cudaMemcpyDeviceToHost));

    float max_err = 0.0f;
    for (int i = 0; i < width; i += 997) {
        float ref = 0.0f;
        for (int j = 0; j < MASK_WIDTH; j++) {
            int k = i - RADIUS + j;
            if (k >= 0 && k < width) ref += h_N[k] * h_M[j];
        }
        max_err = fmaxf(max_err, fabsf(ref - h_P[i]));
    }
    printf("max err (sampled) %e\n", max_err);
    cudaFree(d_N); cudaFree(d_M); cudaFree(d_P);
    free(h_N); free(h_P);
    return 0;
}
