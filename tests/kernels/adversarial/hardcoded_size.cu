// trick: hard-codes the benchmark size n = 16777216 instead of using the parameter (right at the size
// that is timed, wrong anywhere else).
// expect: out_of_bounds
// original: scale_add
// At the odd extra size (n = 1000003, grid = ceil(n / 256)) the last block writes 189 elements past the
// end of out, into its guard region. (A grid-stride variant would write far past the allocation and end
// as an illegal address instead: rejected too, as cuda_error.)
#define N 16777216
extern "C" __global__ void scale_add(const float* x, const float* y, float* out, int n) {
    int i = blockIdx.x * blockDim.x + threadIdx.x;
    if (i < N) out[i] = 3.0f * x[i] + y[i];
}
