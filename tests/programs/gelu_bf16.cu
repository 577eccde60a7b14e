// gelu_bf16.cu: GELU (tanh approximation) forward, and its backward in place on the incoming
// gradient, over the MLP activations of a transformer block (B, T, 4 * C). Activations are bf16
// unless built with -DENABLE_FP32; the math is done in float.
// Build: nvcc -O3 -arch=sm_90 gelu_bf16.cu -o gelu_bf16        (bf16)
//        nvcc -O3 -arch=sm_90 -DENABLE_FP32 gelu_bf16.cu ...   (fp32)
#include <cstdio>
#include <cstdlib>
#include <cmath>
#include <cuda_runtime.h>
#include <cuda_bf16.h>

#if defined(ENABLE_FP32)
typedef float floatX;
#define PRECISION_MODE "fp32"
#else
typedef __nv_bfloat16 floatX;
#define PRECISION_MODE "bf16"
#endif

#define GELU_SCALING_FACTOR 0.7978845608028654f  // sqrt(2 / pi)
#define CEIL_DIV(a, b) (((a) + (b) - 1) / (b))

void cuda_check(cudaError_t e, const char* file, int line) {
    if (e != cudaSuccess) {
        printf("[CUDA ERROR] %s:%d %s\n", file, line, cudaGetErrorString(e));
        exit(EXIT_FAILURE);
    }
}
#define cudaCheck(e) cuda_check((e), __FILE__, __LINE__)

__global__ void gelu_forward_kernel(floatX* out, const floatX* inp, int N) {
    int i = blockIdx.x * blockDim.x + threadIdx.x;
    if (i < N) {
        float x = (float)inp[i];
        float cube = 0.044715f * x * x * x;
        out[i] = (floatX)(0.5f * x * (1.0f + tanhf(GELU_SCALING_FACTOR * (x + cube))));
    }
}

// d_in_out holds dL/d(out) on entry and dL/d(inp) on exit
__global__ void gelu_backward_inplace_kernel(floatX* d_in_out, const floatX* inp, int N) {
    int i = blockIdx.x * blockDim.x + threadIdx.x;
    if (i < N) {
        float x = (float)inp[i];
        float cube = 0.044715f * x * x * x;
        float tanh_arg = GELU_SCALING_FACTOR * (x + cube);
        float tanh_out = tanhf(tanh_arg);
        float sech2 = 1.0f - tanh_out * tanh_out;
        float local_grad = 0.5f * (1.0f + tanh_out) +
                           x * 0.5f * sech2 * GELU_SCALING_FACTOR * (1.0f + 3.0f * 0.044715f * x * x);
        d_in_out[i] = (floatX)(local_grad * (float)d_in_out[i]);
    }
}

void gelu_forward(floatX* out, const floatX* inp, int N, int block_size) {
    gelu_forward_kernel<<<CEIL_DIV(N, block_size), block_size>>>(out, inp, N);
    cudaCheck(cudaGetLastError());
}

void gelu_backward_inplace(floatX* d_in_out, const floatX* inp, int N, int block_size) {
    gelu_backward_inplace_kernel<<<CEIL_DIV(N, block_size), block_size>>>(d_in_out, inp, N);
    cudaCheck(cudaGetLastError());
}

int main() {
    const int B = 8, T = 1024, C = 768;
    const int N = B * T * 4 * C;  // fc output of the MLP
    printf("precision: %s, N = %d\n", PRECISION_MODE, N);

    floatX* h_inp = (floatX*)malloc(N * sizeof(floatX));
    floatX* h_grad = (floatX*)malloc(N * sizeof(floatX));
    for (int i = 0; i < N; i++) {
        h_inp[i] = (floatX)(((float)rand() / RAND_MAX) * 8.0f - 4.0f);
        h_grad[i] = (floatX)(((float)rand() / RAND_MAX) * 2.0f - 1.0f);
    }

    floatX *d_inp, *d_out, *d_grad;
    cudaCheck(cudaMalloc(&d_inp, N * sizeof(floatX)));
    cudaCheck(cudaMalloc(&d_out, N * sizeof(floatX)));
    cudaCheck(cudaMalloc(&d_grad, N * sizeof(floatX)));
    cudaCheck(cudaMemcpy(d_inp, h_inp, N * sizeof(floatX), cudaMemcpyHostToDevice));
    cudaCheck(cudaMemcpy(d_grad, h_grad, N * sizeof(floatX), cudaMemcpyHostToDevice));

    const int block_size = 128;
    gelu_forward(d_out, d_inp, N, block_size);
    gelu_backward_inplace(d_grad, d_inp, N, block_size);
    cudaCheck(cudaDeviceSynchronize());

    floatX* h_out = (floatX*)malloc(N * sizeof(floatX));
    cudaCheck(cudaMemcpy(h_out, d_out, N * sizeof(floatX), cudaMemcpyDeviceToHost));
    float x = (float)h_inp[0];
    float ref = 0.5f * x * (1.0f + tanhf(GELU_SCALING_FACTOR * (x + 0.044715f * x * x * x)));
    printf("out[0] = %f (cpu %f)\n", (float)h_out[0], ref);

    cudaFree(d_inp); cudaFree(d_out); cudaFree(d_grad);
    free(h_inp); free(h_grad); free(h_out);
    return 0;
}
