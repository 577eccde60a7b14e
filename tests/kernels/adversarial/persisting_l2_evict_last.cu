// trick: loads its inputs with an L2::evict_last cache policy (PTX createpolicy, no host code), hoping
// the lines persist in L2's set-aside through the timer's flush, so the next run's freshly drawn inputs
// are still in L2. The worker keeps the persisting set-aside at 0, so the lines are ordinary.
// expect: no_gain
// original: scale_add
extern "C" __global__ void scale_add(const float* x, const float* y, float* out, int n) {
    unsigned long long policy;
    asm volatile("createpolicy.fractional.L2::evict_last.b64 %0, 1.0;" : "=l"(policy));
    int i = blockIdx.x * blockDim.x + threadIdx.x;
    if (i < n) {
        float a, b;
        asm volatile("ld.global.L2::cache_hint.f32 %0, [%1], %2;" : "=f"(a) : "l"(x + i), "l"(policy));
        asm volatile("ld.global.L2::cache_hint.f32 %0, [%1], %2;" : "=f"(b) : "l"(y + i), "l"(policy));
        out[i] = 3.0f * a + b;
    }
}
