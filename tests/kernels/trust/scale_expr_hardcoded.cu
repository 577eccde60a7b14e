// cheat: the benchmark size written into the kernel instead of n (right where it is timed only).
// expect: out_of_bounds
#define N_ELEMENTS (1 << 26)
__global__ void affine(const float* x, float* y, int n) {
    int i = blockIdx.x * blockDim.x + threadIdx.x;
    if (i < N_ELEMENTS) y[i] = 2.0f * x[i] + 1.0f;
}
