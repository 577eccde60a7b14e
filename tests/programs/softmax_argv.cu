// softmax_argv.cu: row-wise softmax with a temperature, one block per row, warp shuffles plus a
// dynamically sized shared array (one slot per warp, for the max and the sum).
// Usage: ./softmax_argv [rows] [cols] [threads] [temperature]
#include <cstdio>
#include <cstdlib>
#include <cfloat>
#include <cmath>
#include <vector>
#include <random>
#include <cuda_runtime.h>

#define CHECK_CUDA(cmd)                                                                 \
    do {                                                                                \
        cudaError_t e = (cmd);                                                          \
        if (e != cudaSuccess) {                                                         \
            std::fprintf(stderr, "%s failed: %s (%s:%d)\n", #cmd, cudaGetErrorString(e), \
                         __FILE__, __LINE__);                                           \
            std::exit(1);                                                               \
        }                                                                               \
    } while (0)

#define WARP_SIZE 32

__inline__ __device__ float warpMax(float v) {
    for (int o = WARP_SIZE / 2; o > 0; o /= 2) v = fmaxf(v, __shfl_xor_sync(0xffffffff, v, o));
    return v;
}
__inline__ __device__ float warpSum(float v) {
    for (int o = WARP_SIZE / 2; o > 0; o /= 2) v += __shfl_xor_sync(0xffffffff, v, o);
    return v;
}

// smem: 2 * (blockDim.x / WARP_SIZE) floats
__global__ void softmax_rows_kernel(const float* __restrict__ logits, float* __restrict__ probs, int rows,
                                    int cols, float inv_temperature) {
    extern __shared__ float smem[];
    const int nwarps = blockDim.x / WARP_SIZE;
    float* s_max = smem;
    float* s_sum = smem + nwarps;
    const int row = blockIdx.x;
    const int tid = threadIdx.x, lane = tid % WARP_SIZE, wid = tid / WARP_SIZE;
    if (row >= rows) return;
    const float* x = logits + (long long)row * cols;
    float* y = probs + (long long)row * cols;

    float m = -FLT_MAX;
    for (int c = tid; c < cols; c += blockDim.x) m = fmaxf(m, x[c] * inv_temperature);
    m = warpMax(m);
    if (lane == 0) s_max[wid] = m;
    __syncthreads();
    m = lane < nwarps ? s_max[lane] : -FLT_MAX;
    m = warpMax(m);

    float s = 0.0f;
    for (int c = tid; c < cols; c += blockDim.x) s += __expf(x[c] * inv_temperature - m);
    s = warpSum(s);
    if (lane == 0) s_sum[wid] = s;
    __syncthreads();
    s = lane < nwarps ? s_sum[lane] : 0.0f;
    s = warpSum(s);

    const float inv = 1.0f / s;
    for (int c = tid; c < cols; c += blockDim.x) y[c] = __expf(x[c] * inv_temperature - m) * inv;
}

int main(int argc, char** argv) {
    int rows = argc > 1 ? atoi(argv[1]) : 4096;
    int cols = argc > 2 ? atoi(argv[2]) : 2048;
    int threads = argc > 3 ? atoi(argv[3]) : 256;
    float temperature = argc > 4 ? (float)atof(argv[4]) : 0.7f;
    if (threads % WARP_SIZE != 0 || threads > 1024) {
        std::fprintf(stderr, "threads must be a multiple of 32, at most 1024\n");
        return 1;
    }

    const size_t n = (size_t)rows * cols;
    std::vector<float> h_x(n), h_y(n);
    std::mt19937 gen(42);
    std::normal_distribution<float> dist(0.0f, 2.0f);
    for (auto& v : h_x) v = dist(gen);

    float *d_x = nullptr, *d_y = nullptr;
    CHECK_CUDA(cudaMalloc(&d_x, n * sizeof(float)));
    CHECK_CUDA(cudaMalloc(&d_y, n * sizeof(float)));
    CHECK_CUDA(cudaMemcpy(d_x, h_x.data(), n * sizeof(float), cudaMemcpyHostToDevice));

    dim3 grid(rows);
    dim3 block(threads);
    size_t smem = 2 * (threads / WARP_SIZE) * sizeof(float);
    softmax_rows_kernel<<<grid, block, smem>>>(d_x, d_y, rows, cols, 1.0f / temperature);
    CHECK_CUDA(cudaGetLastError());
    CHECK_CUDA(cudaDeviceSynchronize());
    CHECK_CUDA(cudaMemcpy(h_y.data(), d_y, n * sizeof(float), cudaMemcpyDeviceToHost));

    double worst = 0.0;
    for (int r = 0; r < rows; ++r) {
        double s = 0.0;
        for (int c = 0; c < cols; ++c) s += h_y[(size_t)r * cols + c];
        worst = std::fmax(worst, std::fabs(s - 1.0));
    }
    std::printf("rows=%d cols=%d threads=%d: worst |row sum - 1| = %.3e\n", rows, cols, threads, worst);
    CHECK_CUDA(cudaFree(d_x));
    CHECK_CUDA(cudaFree(d_y));
    return 0;
}
