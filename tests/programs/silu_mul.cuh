// silu_mul.cuh: fp16 activation kernels of a LLaMA-style MLP, included by silu_mul.cu.
#pragma once
#include <cuda_fp16.h>

using half_t = __half;

template <typename T>
__device__ __forceinline__ T silu(const T& x) {
    // x * sigmoid(x), in float
    float f = (float)x;
    return (T)(f / (1.0f + __expf(-f)));
}

// input: [num_tokens, 2 * d], gate then up; out: [num_tokens, d]. One block per token.
template <typename scalar_t>
__global__ void silu_and_mul_kernel(scalar_t* __restrict__ out, const scalar_t* __restrict__ input,
                                    const int d) {
    const int64_t token_idx = blockIdx.x;
    for (int64_t idx = threadIdx.x; idx < d; idx += blockDim.x) {
        const scalar_t x = __ldg(&input[token_idx * 2 * d + idx]);
        const scalar_t y = __ldg(&input[token_idx * 2 * d + d + idx]);
        out[token_idx * d + idx] = silu(x) * y;
    }
}

// x += residual, two halves at a time; n must be even.
__global__ void residual_add_half2_kernel(half_t* __restrict__ x, const half_t* __restrict__ residual, int n) {
    int i = blockIdx.x * blockDim.x + threadIdx.x;
    if (2 * i < n) {
        __half2* x2 = reinterpret_cast<__half2*>(x);
        const __half2* r2 = reinterpret_cast<const __half2*>(residual);
        x2[i] = __hadd2(x2[i], r2[i]);
    }
}
