// legitimate: a different block shape, 32 x 8 threads, the element index built from both dimensions.
// expect: pass
// original: scale_add
// launch: block_2d
extern "C" __global__ void scale_add(const float* x, const float* y, float* out, int n) {
    int i = (blockIdx.x * blockDim.y + threadIdx.y) * blockDim.x + threadIdx.x;
    if (i < n) out[i] = 3.0f * x[i] + y[i];
}
