// trick: computes only the first half of the output (half the work, half the time).
// expect: unwritten
// original: scale_add
// The second half still holds the poison of both runs.
extern "C" __global__ void scale_add(const float* x, const float* y, float* out, int n) {
    int i = blockIdx.x * blockDim.x + threadIdx.x;
    if (i < n / 2) out[i] = 3.0f * x[i] + y[i];
}
