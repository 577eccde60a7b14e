// cumsum_rows.cu: inclusive prefix sum along each row of a (batch, vocab) probability matrix, the
// first step of top-p (nucleus) sampling. One block of BLOCK threads per row walks the row in chunks
// of BLOCK: a warp-shuffle scan inside each warp, a scan of the warp totals, and a running carry.
#include <cstdio>
#include <cstdlib>
#include <cmath>
#include <vector>
#include <cuda_runtime.h>

#define CUDA_CHECK(x)                                                              \
    do {                                                                           \
        cudaError_t e_ = (x);                                                      \
        if (e_ != cudaSuccess) {                                                   \
            printf("CUDA error: %s at %s:%d\n", cudaGetErrorString(e_), __FILE__, __LINE__); \
            exit(1);                                                               \
        }                                                                          \
    } while (0)

constexpr int kWarp = 32;

template <int BLOCK>
__global__ void __launch_bounds__(BLOCK) inclusive_scan_rows(const float* __restrict__ probs,
                                                             float* __restrict__ cdf, int vocab) {
    static_assert(BLOCK % kWarp == 0 && BLOCK <= 1024, "BLOCK must be a multiple of 32");
    constexpr int kWarps = BLOCK / kWarp;
    __shared__ float warp_totals[kWarps];
    __shared__ float carry;

    const int lane = threadIdx.x % kWarp, warp = threadIdx.x / kWarp;
    const float* in = probs + (size_t)blockIdx.x * vocab;
    float* out = cdf + (size_t)blockIdx.x * vocab;
    if (threadIdx.x == 0) carry = 0.0f;
    __syncthreads();

    for (int base = 0; base < vocab; base += BLOCK) {
        const int i = base + threadIdx.x;
        float v = i < vocab ? in[i] : 0.0f;
#pragma unroll
        for (int o = 1; o < kWarp; o <<= 1) {
            float n = __shfl_up_sync(0xffffffff, v, o);
            if (lane >= o) v += n;
        }
        if (lane == kWarp - 1) warp_totals[warp] = v;
        __syncthreads();
        if (warp == 0) {
            float t = lane < kWarps ? warp_totals[lane] : 0.0f;
#pragma unroll
            for (int o = 1; o < kWarp; o <<= 1) {
                float n = __shfl_up_sync(0xffffffff, t, o);
                if (lane >= o) t += n;
            }
            if (lane < kWarps) warp_totals[lane] = t;  // inclusive scan of the warp totals
        }
        __syncthreads();
        const float offset = carry + (warp > 0 ? warp_totals[warp - 1] : 0.0f);
        if (i < vocab) out[i] = v + offset;
        __syncthreads();
        if (threadIdx.x == BLOCK - 1) carry += warp_totals[kWarps - 1];
        __syncthreads();
    }
}

int main() {
    constexpr int kBatch = 256;
    constexpr int kVocab = 32000;
    constexpr int kBlock = 512;
    const size_t n = (size_t)kBatch * kVocab;

    // softmax-like rows: positive, each summing to 1
    std::vector<float> h_probs(n), h_cdf(n);
    for (int b = 0; b < kBatch; ++b) {
        double s = 0;
        for (int v = 0; v < kVocab; ++v) s += (h_probs[(size_t)b * kVocab + v] = (float)rand() / RAND_MAX);
        for (int v = 0; v < kVocab; ++v) h_probs[(size_t)b * kVocab + v] /= (float)s;
    }

    float *d_probs, *d_cdf;
    CUDA_CHECK(cudaMalloc(&d_probs, n * sizeof(float)));
    CUDA_CHECK(cudaMalloc(&d_cdf, n * sizeof(float)));
    CUDA_CHECK(cudaMemcpy(d_probs, h_probs.data(), n * sizeof(float), cudaMemcpyHostToDevice));

    inclusive_scan_rows<kBlock><<<kBatch, kBlock>>>(d_probs, d_cdf, kVocab);
    CUDA_CHECK(cudaGetLastError());
    CUDA_CHECK(cudaMemcpy(h_cdf.data(), d_cdf, n * sizeof(float), cudaMemcpyDeviceToHost));

    double worst = 0;
    for (int b = 0; b < kBatch; ++b) worst = fmax(worst, fabs(h_cdf[(size_t)b * kVocab + kVocab - 1] - 1.0));
    printf("max |cdf[-1] - 1| = %.3e\n", worst);
    CUDA_CHECK(cudaFree(d_probs));
    CUDA_CHECK(cudaFree(d_cdf));
    return 0;
}
