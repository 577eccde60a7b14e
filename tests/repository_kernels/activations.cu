// Activation kernels of a small training codebase: one thread per element.
#include <cuda_runtime.h>

#define THREADS 256

// No spec: cuda-agent infers one from the (const float* in, float* out, int n) shape.
__global__ void leaky_relu_forward(const float* __restrict__ in, float* __restrict__ out, int n)
{
    const int idx = blockIdx.x * blockDim.x + threadIdx.x;
    if (idx < n) {
        const float v = in[idx];
        out[idx] = v > 0.f ? v : 0.01f * v;
    }
}

void leaky_relu(const float* in, float* out, int n, cudaStream_t stream)
{
    leaky_relu_forward<<<(n + THREADS - 1) / THREADS, THREADS, 0, stream>>>(in, out, n);
}
