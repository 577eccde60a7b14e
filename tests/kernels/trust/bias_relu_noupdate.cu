// cheat: computes y right but skips the in-place update of bias (half the traffic of a parameter step).
// bias is left out of the oracle, so it is checked against the original kernel's.
// expect: mismatch
__global__ void bias_relu_update(const float* x, float* bias, const float* grad, float* y, int rows, int cols,
                                 float lr) {
    int c = blockIdx.x * blockDim.x + threadIdx.x;
    if (c >= cols) return;
    float b = bias[c];
    for (int r = 0; r < rows; ++r) {
        float v = x[(long)r * cols + c] + b;
        y[(long)r * cols + c] = v > 0.0f ? v : 0.0f;
    }
}
