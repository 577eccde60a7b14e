// legitimate: the original with const __restrict__ pointers (read-only loads, no aliasing assumed
// between inputs and output).
// expect: pass
// original: scale_add
extern "C" __global__ void scale_add(const float* __restrict__ x, const float* __restrict__ y,
                                     float* __restrict__ out, int n) {
    int i = blockIdx.x * blockDim.x + threadIdx.x;
    if (i < n) out[i] = 3.0f * __ldg(x + i) + __ldg(y + i);
}
