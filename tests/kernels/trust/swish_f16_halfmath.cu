// legitimate: swish in half-precision arithmetic (hexp, __hdiv): within fp16 tolerance of the oracle but
// not bit-equal to it, so its outputs hit the poison pattern 0xA5A5 at other elements and other counts
// than the oracle's. Must pass verification and its timed runs.
// expect: pass
#include <cuda_fp16.h>
__global__ void swish_f16(const __half* __restrict__ x, __half* __restrict__ y, int n) {
    int i = blockIdx.x * blockDim.x + threadIdx.x;
    if (i < n) {
        __half v = x[i];
        y[i] = __hdiv(v, __hadd(__float2half(1.0f), hexp(__hneg(v))));
    }
}
