// A candidate that never finishes (spins on a flag nothing sets): the verdict "timeout" must come within
// the launch timeout plus a few seconds, and the next candidate must find a worker at once.
// expect: timeout
__device__ int never_set;
__global__ void affine(const float* x, float* y, int n) {
    while (*(volatile int*)&never_set == 0) {
    }
    int i = blockIdx.x * blockDim.x + threadIdx.x;
    if (i < n) y[i] = 2.0f * x[i] + 1.0f;
}
