// trick: correct output, plus 32 stray writes past its end (out[n] .. out[n + 31]).
// expect: out_of_bounds
// original: scale_add
// The 64 KiB guard region after `out` changes: caught even though every in-bounds value is right.
extern "C" __global__ void scale_add(const float* x, const float* y, float* out, int n) {
    int i = blockIdx.x * blockDim.x + threadIdx.x;
    if (i < n) out[i] = 3.0f * x[i] + y[i];
    if (i < 32) out[n + i] = 0.0f;
}
