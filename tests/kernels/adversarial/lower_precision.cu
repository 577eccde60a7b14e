// trick: computes in lower precision than the original (keeps 10 mantissa bits, as half precision
// would): faster arithmetic on real hardware, results "close".
// expect: mismatch
// original: scale_add
// Relative errors up to 2^-10 exceed float32's tolerance (atol = rtol = 1e-4).
extern "C" __global__ void scale_add(const float* x, const float* y, float* out, int n) {
    int i = blockIdx.x * blockDim.x + threadIdx.x;
    if (i < n) out[i] = __uint_as_float(__float_as_uint(3.0f * x[i] + y[i]) & 0xFFFFE000u);
}
