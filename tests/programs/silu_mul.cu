// silu_mul.cu: drives the kernels of silu_mul.cuh the way an inference engine would: a prefill step
// (many tokens) and a decode step (one token per sequence of the batch), on one stream.
#include <algorithm>
#include <cstdio>
#include <cstdlib>
#include <vector>
#include <cuda_runtime.h>
#include "silu_mul.cuh"

#define CUDA_CHECK(expr)                                                                   \
    do {                                                                                   \
        cudaError_t status_ = (expr);                                                      \
        if (status_ != cudaSuccess) {                                                      \
            std::fprintf(stderr, "%s:%d: %s\n", __FILE__, __LINE__, cudaGetErrorString(status_)); \
            std::abort();                                                                  \
        }                                                                                  \
    } while (0)

struct MlpConfig {
    int hidden_size;        // 4096
    int intermediate_size;  // 11008
};

void silu_and_mul(half_t* out, const half_t* input, int num_tokens, int d, cudaStream_t stream) {
    dim3 grid(num_tokens);
    dim3 block(std::min(d, 1024));
    silu_and_mul_kernel<half_t><<<grid, block, 0, stream>>>(out, input, d);
    CUDA_CHECK(cudaGetLastError());
}

void residual_add(half_t* x, const half_t* residual, int num_tokens, int hidden, cudaStream_t stream) {
    const int n = num_tokens * hidden;
    const int threads = 256;
    const int blocks = (n / 2 + threads - 1) / threads;
    residual_add_half2_kernel<<<blocks, threads, 0, stream>>>(x, residual, n);
    CUDA_CHECK(cudaGetLastError());
}

int main() {
    const MlpConfig cfg{4096, 11008};
    const int max_tokens = 2048;  // prefill chunk
    const int decode_batch = 16;

    std::vector<half_t> h_gate_up((size_t)max_tokens * 2 * cfg.intermediate_size);
    std::vector<half_t> h_hidden((size_t)max_tokens * cfg.hidden_size);
    for (auto& v : h_gate_up) v = __float2half((float)rand() / RAND_MAX * 4.0f - 2.0f);
    for (auto& v : h_hidden) v = __float2half((float)rand() / RAND_MAX - 0.5f);

    half_t *d_gate_up, *d_act, *d_hidden, *d_residual;
    CUDA_CHECK(cudaMalloc(&d_gate_up, h_gate_up.size() * sizeof(half_t)));
    CUDA_CHECK(cudaMalloc(&d_act, (size_t)max_tokens * cfg.intermediate_size * sizeof(half_t)));
    CUDA_CHECK(cudaMalloc(&d_hidden, h_hidden.size() * sizeof(half_t)));
    CUDA_CHECK(cudaMalloc(&d_residual, h_hidden.size() * sizeof(half_t)));
    CUDA_CHECK(cudaMemcpy(d_gate_up, h_gate_up.data(), h_gate_up.size() * sizeof(half_t), cudaMemcpyHostToDevice));
    CUDA_CHECK(cudaMemcpy(d_hidden, h_hidden.data(), h_hidden.size() * sizeof(half_t), cudaMemcpyHostToDevice));
    CUDA_CHECK(cudaMemcpy(d_residual, h_hidden.data(), h_hidden.size() * sizeof(half_t), cudaMemcpyHostToDevice));

    cudaStream_t stream;
    CUDA_CHECK(cudaStreamCreateWithFlags(&stream, cudaStreamNonBlocking));

    // prefill
    silu_and_mul(d_act, d_gate_up, max_tokens, cfg.intermediate_size, stream);
    residual_add(d_hidden, d_residual, max_tokens, cfg.hidden_size, stream);
    // decode
    silu_and_mul(d_act, d_gate_up, decode_batch, cfg.intermediate_size, stream);
    residual_add(d_hidden, d_residual, decode_batch, cfg.hidden_size, stream);
    CUDA_CHECK(cudaStreamSynchronize(stream));

    std::vector<half_t> h_act(decode_batch * cfg.intermediate_size);
    CUDA_CHECK(cudaMemcpy(h_act.data(), d_act, h_act.size() * sizeof(half_t), cudaMemcpyDeviceToHost));
    float g = __half2float(h_gate_up[0]), u = __half2float(h_gate_up[cfg.intermediate_size]);
    std::printf("act[0] = %f, expected %f\n", __half2float(h_act[0]), g / (1.0f + std::exp(-g)) * u);

    CUDA_CHECK(cudaStreamDestroy(stream));
    cudaFree(d_gate_up); cudaFree(d_act); cudaFree(d_hidden); cudaFree(d_residual);
    return 0;
}
