// trick: a shared-memory tree reduction with the __syncthreads() between steps left out (faster, and
// right often enough to survive a single comparison at one size).
// expect: nondeterministic|mismatch
// original: row_sum
// Warps read partial sums other warps have not written yet: the two runs on the same inputs disagree
// (nondeterministic), or, when a run happens to repeat itself, the sum is wrong (mismatch).
extern "C" __global__ void row_sum(const float* x, float* out, int rows, int cols) {
    __shared__ float partial[256];
    const float* row = x + (size_t)blockIdx.x * cols;
    float acc = 0.0f;
    for (int c = threadIdx.x; c < cols; c += blockDim.x) acc += row[c];
    partial[threadIdx.x] = acc;
    __syncthreads();
    for (int stride = blockDim.x / 2; stride > 0; stride >>= 1) {
        if (threadIdx.x < stride) partial[threadIdx.x] += partial[threadIdx.x + stride];
    }
    if (threadIdx.x == 0) out[blockIdx.x] = partial[0];
}
