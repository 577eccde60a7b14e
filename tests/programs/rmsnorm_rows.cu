// rmsnorm_rows.cu: RMSNorm forward over (B, T, C) activations, one thread block per row, in the style
// of a dev/cuda benchmark file: a CPU reference, a launcher taking the block size, a timing loop.
// Build: nvcc -O3 --use_fast_math -arch=sm_90 rmsnorm_rows.cu -o rmsnorm_rows
#include <stdio.h>
#include <stdlib.h>
#include <math.h>
#include <cuda_runtime.h>

// ----------------------------------------------------------------------------
// utils

#define CEIL_DIV(M, N) (((M) + (N) - 1) / (N))
#define WARP_SIZE 32

void cuda_check(cudaError_t error, const char* file, int line) {
    if (error != cudaSuccess) {
        printf("[CUDA ERROR] at file %s:%d:\n%s\n", file, line, cudaGetErrorString(error));
        exit(EXIT_FAILURE);
    }
}
#define cudaCheck(err) (cuda_check(err, __FILE__, __LINE__))

float* make_random_float(size_t n) {
    float* arr = (float*)malloc(n * sizeof(float));
    for (size_t i = 0; i < n; i++) arr[i] = ((float)rand() / RAND_MAX) * 2.0f - 1.0f;
    return arr;
}

// ----------------------------------------------------------------------------
// CPU reference

void rmsnorm_forward_cpu(float* out, float* rrms, const float* inp, const float* weight, int N, int C,
                         float eps) {
    for (int row = 0; row < N; row++) {
        const float* x = inp + (size_t)row * C;
        double ss = 0.0;
        for (int i = 0; i < C; i++) ss += (double)x[i] * x[i];
        float r = 1.0f / sqrtf((float)(ss / C) + eps);
        for (int i = 0; i < C; i++) out[(size_t)row * C + i] = x[i] * r * weight[i];
        rrms[row] = r;
    }
}

// ----------------------------------------------------------------------------
// GPU kernel

__device__ __forceinline__ float warp_sum(float v) {
    for (int offset = WARP_SIZE / 2; offset > 0; offset >>= 1) v += __shfl_xor_sync(0xffffffff, v, offset);
    return v;
}

// sum over the whole block, broadcast to every thread; blockDim.x must be a multiple of 32
__device__ float block_sum(float v) {
    __shared__ float partial[WARP_SIZE];
    int lane = threadIdx.x % WARP_SIZE;
    int warp = threadIdx.x / WARP_SIZE;
    v = warp_sum(v);
    if (lane == 0) partial[warp] = v;
    __syncthreads();
    int num_warps = blockDim.x / WARP_SIZE;
    v = (lane < num_warps) ? partial[lane] : 0.0f;
    v = warp_sum(v);
    __syncthreads();  // partial[] is reused by the next call
    return v;
}

__global__ void rmsnorm_forward_kernel(float* __restrict__ out, float* __restrict__ rrms,
                                       const float* __restrict__ inp, const float* __restrict__ weight,
                                       int N, int C, float eps) {
    int row = blockIdx.x;  // one block per row
    if (row >= N) return;
    const float* x = inp + (size_t)row * C;
    float* o = out + (size_t)row * C;

    float ss = 0.0f;
    for (int i = threadIdx.x; i < C; i += blockDim.x) ss += x[i] * x[i];
    ss = block_sum(ss);
    float r = rsqrtf(ss / C + eps);
    if (threadIdx.x == 0) rrms[row] = r;

    for (int i = threadIdx.x; i < C; i += blockDim.x) o[i] = x[i] * r * weight[i];
}

void rmsnorm_forward(float* out, float* rrms, const float* inp, const float* weight, int N, int C, float eps,
                     const int block_size) {
    const int grid_size = N;
    rmsnorm_forward_kernel<<<grid_size, block_size>>>(out, rrms, inp, weight, N, C, eps);
    cudaCheck(cudaGetLastError());
}

// ----------------------------------------------------------------------------

int main(int argc, char** argv) {
    srand(0);
    int B = 4;
    int T = 2048;
    int C = 4096;

    float* out = (float*)malloc(B * T * C * sizeof(float));
    float* rrms = (float*)malloc(B * T * sizeof(float));
    float* inp = make_random_float(B * T * C);
    float* weight = make_random_float(C);

    float *d_out, *d_rrms, *d_inp, *d_weight;
    cudaCheck(cudaMalloc(&d_out, B * T * C * sizeof(float)));
    cudaCheck(cudaMalloc(&d_rrms, B * T * sizeof(float)));
    cudaCheck(cudaMalloc(&d_inp, B * T * C * sizeof(float)));
    cudaCheck(cudaMalloc(&d_weight, C * sizeof(float)));
    cudaCheck(cudaMemcpy(d_inp, inp, B * T * C * sizeof(float), cudaMemcpyHostToDevice));
    cudaCheck(cudaMemcpy(d_weight, weight, C * sizeof(float), cudaMemcpyHostToDevice));

    rmsnorm_forward_cpu(out, rrms, inp, weight, B * T, C, 1e-5f);

    int block_size = 512;
    if (argc > 1) block_size = atoi(argv[1]);
    rmsnorm_forward(d_out, d_rrms, d_inp, d_weight, B * T, C, 1e-5f, block_size);

    float* gpu_out = (float*)malloc(B * T * C * sizeof(float));
    cudaCheck(cudaMemcpy(gpu_out, d_out, B * T * C * sizeof(float), cudaMemcpyDeviceToHost));
    float max_diff = 0.0f;
    for (int i = 0; i < B * T * C; i++) max_diff = fmaxf(max_diff, fabsf(gpu_out[i] - out[i]));
    printf("block_size %d: max diff %e\n", block_size, max_diff);

    cudaEvent_t start, stop;
    cudaCheck(cudaEventCreate(&start));
    cudaCheck(cudaEventCreate(&stop));
    const int repeat = 100;
    cudaCheck(cudaEventRecord(start));
    for (int r = 0; r < repeat; r++) rmsnorm_forward(d_out, d_rrms, d_inp, d_weight, B * T, C, 1e-5f, block_size);
    cudaCheck(cudaEventRecord(stop));
    cudaCheck(cudaEventSynchronize(stop));
    float ms;
    cudaCheck(cudaEventElapsedTime(&ms, start, stop));
    printf("time %.4f ms\n", ms / repeat);

    free(out); free(rrms); free(inp); free(weight); free(gpu_out);
    cudaCheck(cudaFree(d_out)); cudaCheck(cudaFree(d_rrms));
    cudaCheck(cudaFree(d_inp)); cudaCheck(cudaFree(d_weight));
    return 0;
}
