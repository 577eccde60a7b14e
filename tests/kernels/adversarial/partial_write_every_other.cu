// trick: writes only every other element (a strided sample a sloppy check might accept).
// expect: unwritten
// original: scale_add
extern "C" __global__ void scale_add(const float* x, const float* y, float* out, int n) {
    int i = blockIdx.x * blockDim.x + threadIdx.x;
    if (i < n && i % 2 == 0) out[i] = 3.0f * x[i] + y[i];
}
