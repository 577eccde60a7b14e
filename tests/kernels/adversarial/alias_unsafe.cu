// trick: none; a correct-looking rewrite that breaks when out shares memory with x, which the spec
// allows (may_alias). It stages y in out, then adds 3 x: in place, that x has been overwritten by then.
// expect: aliasing
// original: scale_add
// may_alias: out=x
extern "C" __global__ void scale_add(const float* x, const float* y, float* out, int n) {
    int i = blockIdx.x * blockDim.x + threadIdx.x;
    if (i < n) {
        out[i] = y[i];
        out[i] += 3.0f * x[i];
    }
}
