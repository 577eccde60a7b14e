// legitimate: float4 loads and stores, four elements a thread, with a scalar tail for n % 4 != 0
// (buffers are 256-byte aligned, so the vector accesses are too).
// expect: pass
// original: scale_add
// launch: per_4_elements
extern "C" __global__ void scale_add(const float* x, const float* y, float* out, int n) {
    int v = blockIdx.x * blockDim.x + threadIdx.x;
    int i = 4 * v;
    if (i + 3 < n) {
        float4 a = reinterpret_cast<const float4*>(x)[v];
        float4 b = reinterpret_cast<const float4*>(y)[v];
        float4 r = make_float4(3.0f * a.x + b.x, 3.0f * a.y + b.y, 3.0f * a.z + b.z, 3.0f * a.w + b.w);
        reinterpret_cast<float4*>(out)[v] = r;
    } else {
        for (; i < n; ++i) out[i] = 3.0f * x[i] + y[i];
    }
}
