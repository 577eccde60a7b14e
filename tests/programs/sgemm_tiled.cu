// sgemm_tiled.cu: C = alpha * A @ B + beta * C (row-major), the textbook shared-memory tiled kernel
// with the tile size as a template parameter. A small problem is checked against the CPU first, then
// the big one is timed.
#include <cstdio>
#include <cstdlib>
#include <cmath>
#include <vector>
#include <cuda_runtime.h>

#define CEIL_DIV(M, N) (((M) + (N) - 1) / (N))
#define CUDA_CHECK(x)                                                                        \
    do {                                                                                     \
        cudaError_t status = (x);                                                            \
        if (status != cudaSuccess) {                                                         \
            fprintf(stderr, "%s:%d: %s: %s\n", __FILE__, __LINE__, #x, cudaGetErrorString(status)); \
            exit(1);                                                                         \
        }                                                                                    \
    } while (0)

// A is M x K, B is K x N, C is M x N; blockDim must be (TILE, TILE).
template <int TILE>
__global__ void sgemm_tiled(int M, int N, int K, float alpha, const float* A, const float* B, float beta,
                            float* C) {
    __shared__ float As[TILE][TILE];
    __shared__ float Bs[TILE][TILE];
    const int tx = threadIdx.x, ty = threadIdx.y;
    const int row = blockIdx.y * TILE + ty;
    const int col = blockIdx.x * TILE + tx;

    float acc = 0.0f;
    for (int k0 = 0; k0 < K; k0 += TILE) {
        As[ty][tx] = (row < M && k0 + tx < K) ? A[row * K + k0 + tx] : 0.0f;
        Bs[ty][tx] = (k0 + ty < K && col < N) ? B[(k0 + ty) * N + col] : 0.0f;
        __syncthreads();
#pragma unroll
        for (int k = 0; k < TILE; ++k) acc += As[ty][k] * Bs[k][tx];
        __syncthreads();
    }
    if (row < M && col < N) C[row * N + col] = alpha * acc + beta * C[row * N + col];
}

template <int TILE>
void run_sgemm(int M, int N, int K, float alpha, const float* A, const float* B, float beta, float* C) {
    dim3 blockDim(TILE, TILE);
    dim3 gridDim(CEIL_DIV(N, TILE), CEIL_DIV(M, TILE));
    sgemm_tiled<TILE><<<gridDim, blockDim>>>(M, N, K, alpha, A, B, beta, C);
    CUDA_CHECK(cudaGetLastError());
}

static void randomize(std::vector<float>& v) {
    for (auto& x : v) x = (float)(rand() % 1000) / 500.0f - 1.0f;
}

static bool check(int M, int N, int K, float alpha, float beta) {
    std::vector<float> A(M * K), B(K * N), C(M * N), ref(M * N);
    randomize(A); randomize(B); randomize(C);
    for (int i = 0; i < M; ++i)
        for (int j = 0; j < N; ++j) {
            double s = 0;
            for (int k = 0; k < K; ++k) s += (double)A[i * K + k] * B[k * N + j];
            ref[i * N + j] = alpha * (float)s + beta * C[i * N + j];
        }
    float *dA, *dB, *dC;
    CUDA_CHECK(cudaMalloc(&dA, sizeof(float) * M * K));
    CUDA_CHECK(cudaMalloc(&dB, sizeof(float) * K * N));
    CUDA_CHECK(cudaMalloc(&dC, sizeof(float) * M * N));
    CUDA_CHECK(cudaMemcpy(dA, A.data(), sizeof(float) * M * K, cudaMemcpyHostToDevice));
    CUDA_CHECK(cudaMemcpy(dB, B.data(), sizeof(float) * K * N, cudaMemcpyHostToDevice));
    CUDA_CHECK(cudaMemcpy(dC, C.data(), sizeof(float) * M * N, cudaMemcpyHostToDevice));
    run_sgemm<32>(M, N, K, alpha, dA, dB, beta, dC);
    CUDA_CHECK(cudaMemcpy(C.data(), dC, sizeof(float) * M * N, cudaMemcpyDeviceToHost));
    double err = 0;
    for (int i = 0; i < M * N; ++i) err = fmax(err, fabs(C[i] - ref[i]));
    cudaFree(dA); cudaFree(dB); cudaFree(dC);
    printf("check %dx%dx%d: max err %g\n", M, N, K, err);
    return err < 1e-3;
}

int main() {
    constexpr int M = 4096, N = 2048, K = 1024;
    const float alpha = 1.0f, beta = 0.5f;
    if (!check(129, 97, 200, alpha, beta)) return 1;

    float *A, *B, *C;
    CUDA_CHECK(cudaMalloc(&A, sizeof(float) * M * K));
    CUDA_CHECK(cudaMalloc(&B, sizeof(float) * K * N));
    CUDA_CHECK(cudaMalloc(&C, sizeof(float) * M * N));
    std::vector<float> h(M * K);
    randomize(h);
    CUDA_CHECK(cudaMemcpy(A, h.data(), sizeof(float) * M * K, cudaMemcpyHostToDevice));
    CUDA_CHECK(cudaMemcpy(B, h.data(), sizeof(float) * K * N, cudaMemcpyHostToDevice));
    CUDA_CHECK(cudaMemset(C, 0, sizeof(float) * M * N));

    cudaEvent_t beg, end;
    cudaEventCreate(&beg);
    cudaEventCreate(&end);
    const int reps = 20;
    cudaEventRecord(beg);
    for (int r = 0; r < reps; ++r) run_sgemm<32>(M, N, K, alpha, A, B, beta, C);
    cudaEventRecord(end);
    cudaEventSynchronize(end);
    float ms;
    cudaEventElapsedTime(&ms, beg, end);
    ms /= reps;
    printf("%dx%dx%d: %.3f ms, %.1f GFLOP/s\n", M, N, K, ms, 2.0 * M * N * K / ms / 1e6);
    cudaFree(A); cudaFree(B); cudaFree(C);
    return 0;
}
