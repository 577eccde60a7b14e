// trick: returns before writing anything, so it "runs" in no time and leaves the output as it was.
// expect: unwritten
// original: scale_add
// Outputs are poisoned (0xFF, then 0xA5) before each of two runs: every element still holds the poison.
extern "C" __global__ void scale_add(const float* x, const float* y, float* out, int n) {
    int i = blockIdx.x * blockDim.x + threadIdx.x;
    if (i >= 0) return;
    if (i < n) out[i] = 3.0f * x[i] + y[i];
}
