// layernorm_warp.cu: LayerNorm forward, one warp per row (several rows per block), saving mean and
// rstd for the backward pass. Validated once, then timed over a sweep of block sizes.
// Build: nvcc -O3 -arch=sm_90 layernorm_warp.cu -o layernorm_warp
#include <cstdio>
#include <cstdlib>
#include <cmath>
#include <cuda_runtime.h>

#define CEIL_DIV(M, N) (((M) + (N) - 1) / (N))
constexpr int WARP_SIZE = 32;

#define cudaCheck(call)                                                                  \
    do {                                                                                 \
        cudaError_t e = (call);                                                          \
        if (e != cudaSuccess) {                                                          \
            printf("[CUDA ERROR] %s:%d: %s\n", __FILE__, __LINE__, cudaGetErrorString(e)); \
            exit(1);                                                                     \
        }                                                                                \
    } while (0)

__device__ inline float warp_reduce_sum(float val) {
#pragma unroll
    for (int mask = WARP_SIZE / 2; mask > 0; mask >>= 1) val += __shfl_xor_sync(0xffffffffu, val, mask);
    return val;
}

__global__ void layernorm_forward_warp(float* __restrict__ out, float* __restrict__ mean,
                                       float* __restrict__ rstd, const float* __restrict__ inp,
                                       const float* __restrict__ weight, const float* __restrict__ bias,
                                       int N, int C, float eps) {
    const int lane = threadIdx.x % WARP_SIZE;
    const int warps_per_block = blockDim.x / WARP_SIZE;
    const int row = blockIdx.x * warps_per_block + threadIdx.x / WARP_SIZE;
    if (row >= N) return;

    const float* x = inp + (size_t)row * C;
    float sum = 0.0f;
    for (int i = lane; i < C; i += WARP_SIZE) sum += x[i];
    const float m = warp_reduce_sum(sum) / C;

    float var = 0.0f;
    for (int i = lane; i < C; i += WARP_SIZE) {
        float d = x[i] - m;
        var += d * d;
    }
    const float s = rsqrtf(warp_reduce_sum(var) / C + eps);

    float* o = out + (size_t)row * C;
    for (int i = lane; i < C; i += WARP_SIZE) o[i] = (x[i] - m) * s * weight[i] + bias[i];
    if (lane == 0) {
        mean[row] = m;
        rstd[row] = s;
    }
}

void layernorm_forward(float* out, float* mean, float* rstd, const float* inp, const float* weight,
                       const float* bias, int B, int T, int C, int block_size) {
    const int N = B * T;
    const int grid_size = CEIL_DIV(N * WARP_SIZE, block_size);
    layernorm_forward_warp<<<grid_size, block_size>>>(out, mean, rstd, inp, weight, bias, N, C, 1e-5f);
    cudaCheck(cudaGetLastError());
}

static void fill(float* p, size_t n, float scale) {
    for (size_t i = 0; i < n; i++) p[i] = scale * ((float)rand() / RAND_MAX * 2.0f - 1.0f);
}

int main() {
    const int B = 8, T = 1024, C = 768;  // GPT-2 small
    const size_t act = (size_t)B * T * C;

    float* h_inp = (float*)malloc(act * sizeof(float));
    float* h_w = (float*)malloc(C * sizeof(float));
    float* h_b = (float*)malloc(C * sizeof(float));
    fill(h_inp, act, 1.0f);
    for (int i = 0; i < C; i++) h_w[i] = 1.0f + 0.1f * ((float)rand() / RAND_MAX - 0.5f);
    fill(h_b, C, 0.1f);

    float *d_out, *d_mean, *d_rstd, *d_inp, *d_w, *d_b;
    cudaCheck(cudaMalloc(&d_out, act * sizeof(float)));
    cudaCheck(cudaMalloc(&d_mean, B * T * sizeof(float)));
    cudaCheck(cudaMalloc(&d_rstd, B * T * sizeof(float)));
    cudaCheck(cudaMalloc(&d_inp, act * sizeof(float)));
    cudaCheck(cudaMalloc(&d_w, C * sizeof(float)));
    cudaCheck(cudaMalloc(&d_b, C * sizeof(float)));
    cudaCheck(cudaMemcpy(d_inp, h_inp, act * sizeof(float), cudaMemcpyHostToDevice));
    cudaCheck(cudaMemcpy(d_w, h_w, C * sizeof(float), cudaMemcpyHostToDevice));
    cudaCheck(cudaMemcpy(d_b, h_b, C * sizeof(float), cudaMemcpyHostToDevice));

    // correctness at the first block size, then time them all
    int block_sizes[] = {128, 32, 64, 256, 512, 1024};
    layernorm_forward(d_out, d_mean, d_rstd, d_inp, d_w, d_b, B, T, C, block_sizes[0]);
    float* h_mean = (float*)malloc(B * T * sizeof(float));
    cudaCheck(cudaMemcpy(h_mean, d_mean, B * T * sizeof(float), cudaMemcpyDeviceToHost));
    double m0 = 0.0;
    for (int i = 0; i < C; i++) m0 += h_inp[i];
    printf("row 0 mean: gpu %f cpu %f\n", h_mean[0], m0 / C);

    cudaEvent_t t0, t1;
    cudaCheck(cudaEventCreate(&t0));
    cudaCheck(cudaEventCreate(&t1));
    for (int block_size : block_sizes) {
        cudaCheck(cudaEventRecord(t0));
        for (int r = 0; r < 50; r++) layernorm_forward(d_out, d_mean, d_rstd, d_inp, d_w, d_b, B, T, C, block_size);
        cudaCheck(cudaEventRecord(t1));
        cudaCheck(cudaEventSynchronize(t1));
        float ms;
        cudaCheck(cudaEventElapsedTime(&ms, t0, t1));
        printf("block_size %4d | time %.4f ms\n", block_size, ms / 50);
    }
    free(h_inp); free(h_w); free(h_b); free(h_mean);
    cudaFree(d_out); cudaFree(d_mean); cudaFree(d_rstd); cudaFree(d_inp); cudaFree(d_w); cudaFree(d_b);
    return 0;
}
