// The original element-wise kernel the adversarial candidates in adversarial/ try to pass for.
// out[i] = 3 x[i] + y[i], one thread per element, 256 threads a block, grid = ceil(n / 256).
extern "C" __global__ void scale_add(const float* x, const float* y, float* out, int n) {
    int i = blockIdx.x * blockDim.x + threadIdx.x;
    if (i < n) out[i] = 3.0f * x[i] + y[i];
}
