// legitimate: each thread adds its partial sum to a shared accumulator with a float atomicAdd. The order
// of the additions changes from run to run, so the results differ in the last bits: the determinism
// check must accept that (within the float tolerance) rather than call it a race.
// expect: pass
// original: row_sum
extern "C" __global__ void row_sum(const float* x, float* out, int rows, int cols) {
    __shared__ float total;
    const float* row = x + (size_t)blockIdx.x * cols;
    if (threadIdx.x == 0) total = 0.0f;
    __syncthreads();
    float acc = 0.0f;
    for (int c = threadIdx.x; c < cols; c += blockDim.x) acc += row[c];
    atomicAdd(&total, acc);
    __syncthreads();
    if (threadIdx.x == 0) out[blockIdx.x] = total;
}
