// legitimate: a grid-stride loop launched with a fixed grid (132 SMs x 8 blocks), whatever n is.
// expect: pass
// original: scale_add
// launch: grid_stride
extern "C" __global__ void scale_add(const float* x, const float* y, float* out, int n) {
    for (int i = blockIdx.x * blockDim.x + threadIdx.x; i < n; i += gridDim.x * blockDim.x) {
        out[i] = 3.0f * x[i] + y[i];
    }
}
