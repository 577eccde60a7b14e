// cheat: precision downgrade. Rounds both operands to TF32 (10 mantissa bits) before multiplying, as a
// tensor-core TF32 path would; against an oracle that itself runs in TF32 it "matches".
// expect: mismatch
__device__ __forceinline__ float to_tf32(float v) {
    unsigned int r;
    asm("cvt.rna.tf32.f32 %0, %1;" : "=r"(r) : "f"(v));
    return __uint_as_float(r);
}
__global__ void conv2d_3x3(const float* x, const float* w, float* y, int N, int C, int H, int W, int K) {
    int Ho = H - 2, Wo = W - 2;
    long idx = (long)blockIdx.x * blockDim.x + threadIdx.x;
    if (idx >= (long)N * K * Ho * Wo) return;
    int ow = idx % Wo, oh = (idx / Wo) % Ho, k = (idx / ((long)Wo * Ho)) % K, n = idx / ((long)Wo * Ho * K);
    float acc = 0.0f;
    for (int c = 0; c < C; ++c)
        for (int r = 0; r < 3; ++r)
            for (int s = 0; s < 3; ++s)
                acc += to_tf32(x[(((long)n * C + c) * H + oh + r) * W + ow + s]) *
                       to_tf32(w[((k * C + c) * 3 + r) * 3 + s]);
    y[idx] = acc;
}
