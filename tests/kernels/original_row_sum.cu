// The original row-wise reduction for the race and atomics cases: out[r] = sum over c of x[r, c].
// One block of 256 threads per row, a shared-memory tree reduction.
extern "C" __global__ void row_sum(const float* x, float* out, int rows, int cols) {
    __shared__ float partial[256];
    const float* row = x + (size_t)blockIdx.x * cols;
    float acc = 0.0f;
    for (int c = threadIdx.x; c < cols; c += blockDim.x) acc += row[c];
    partial[threadIdx.x] = acc;
    __syncthreads();
    for (int stride = blockDim.x / 2; stride > 0; stride >>= 1) {
        if (threadIdx.x < stride) partial[threadIdx.x] += partial[threadIdx.x + stride];
        __syncthreads();
    }
    if (threadIdx.x == 0) out[blockIdx.x] = partial[0];
}
