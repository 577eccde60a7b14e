// trick: every thread adds its partial sum into one shared accumulator with a plain += (no atomic):
// updates are lost, differently each run.
// expect: nondeterministic|mismatch
// original: row_sum
extern "C" __global__ void row_sum(const float* x, float* out, int rows, int cols) {
    __shared__ float total;
    const float* row = x + (size_t)blockIdx.x * cols;
    if (threadIdx.x == 0) total = 0.0f;
    __syncthreads();
    float acc = 0.0f;
    for (int c = threadIdx.x; c < cols; c += blockDim.x) acc += row[c];
    *(volatile float*)&total += acc;
    __syncthreads();
    if (threadIdx.x == 0) out[blockIdx.x] = total;
}
