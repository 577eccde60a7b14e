// attention_causal.cu: naive causal self-attention forward in three kernels over a fused qkv buffer
// (B, T, 3C), as a GPT-2 training loop lays it out: scores = q k^T * scale with -inf above the diagonal,
// a causal softmax per query row, then att @ v back into (B, T, C). Checked against the CPU at a small
// size, then run at the training size.
#include <cstdio>
#include <cstdlib>
#include <cmath>
#include <cfloat>
#include <vector>
#include <cuda_runtime.h>

#define CEIL_DIV(a, b) (((a) + (b) - 1) / (b))
#define cudaCheck(call)                                                                       \
    do {                                                                                      \
        cudaError_t err__ = (call);                                                           \
        if (err__ != cudaSuccess) {                                                           \
            fprintf(stderr, "CUDA error at %s:%d: %s\n", __FILE__, __LINE__, cudaGetErrorString(err__)); \
            exit(EXIT_FAILURE);                                                               \
        }                                                                                     \
    } while (0)

// preatt: (B, NH, T, T); inp: (B, T, 3C) holding q, k, v, each (NH, hs) with hs = C / NH
__global__ void attention_query_key_kernel(float* preatt, const float* inp, int B, int T, int C, int NH,
                                           float scale) {
    int idx = blockIdx.x * blockDim.x + threadIdx.x;
    int total_threads = B * NH * T * T;
    if (idx < total_threads) {
        int t2 = idx % T;
        int t = (idx / T) % T;
        if (t2 > t) {
            preatt[idx] = -INFINITY;  // future token: masked
            return;
        }
        int h = (idx / (T * T)) % NH;
        int b = idx / (NH * T * T);
        int C3 = C * 3;
        int hs = C / NH;
        const float* query_t = inp + b * T * C3 + t * C3 + h * hs;
        const float* key_t2 = inp + b * T * C3 + t2 * C3 + h * hs + C;  // +C: the k part
        float val = 0.0f;
        for (int i = 0; i < hs; i++) val += query_t[i] * key_t2[i];
        preatt[idx] = val * scale;
    }
}

// att, preatt: (B, NH, T, T); one thread per (b, h, t) row, only t2 <= t is read; att is 0 above
__global__ void attention_softmax_kernel(float* att, const float* preatt, int B, int T, int NH) {
    int idx = blockIdx.x * blockDim.x + threadIdx.x;
    if (idx < B * T * NH) {
        int t = idx % T;
        const float* pre_row = preatt + (size_t)idx * T;
        float* att_row = att + (size_t)idx * T;
        float maxval = -FLT_MAX;
        for (int t2 = 0; t2 <= t; t2++) maxval = fmaxf(maxval, pre_row[t2]);
        float expsum = 0.0f;
        for (int t2 = 0; t2 <= t; t2++) {
            float e = expf(pre_row[t2] - maxval);
            expsum += e;
            att_row[t2] = e;
        }
        float inv = expsum == 0.0f ? 0.0f : 1.0f / expsum;
        for (int t2 = 0; t2 < T; t2++) att_row[t2] = t2 <= t ? att_row[t2] * inv : 0.0f;
    }
}

// out: (B, T, C); one thread per (b, t, h), att (B, NH, T, T) read only at t2 <= t
__global__ void attention_value_kernel(float* out, const float* att, const float* inp, int B, int T, int C,
                                       int NH) {
    int idx = blockIdx.x * blockDim.x + threadIdx.x;
    if (idx < B * T * NH) {
        int h = idx % NH;
        int t = (idx / NH) % T;
        int b = idx / (NH * T);
        int C3 = C * 3;
        int hs = C / NH;
        float* out_bth = out + b * T * C + t * C + h * hs;
        const float* att_bth = att + (size_t)((b * NH + h) * T + t) * T;
        for (int i = 0; i < hs; i++) out_bth[i] = 0.0f;
        for (int t2 = 0; t2 <= t; t2++) {
            const float* value_t2 = inp + b * T * C3 + t2 * C3 + h * hs + 2 * C;  // +2C: the v part
            float a = att_bth[t2];
            for (int i = 0; i < hs; i++) out_bth[i] += a * value_t2[i];
        }
    }
}

void attention_forward(float* out, float* preatt, float* att, const float* inp, int B, int T, int C, int NH,
                       int block_size) {
    const int hs = C / NH;
    const float scale = 1.0f / sqrtf((float)hs);
    int total_threads = B * NH * T * T;
    attention_query_key_kernel<<<CEIL_DIV(total_threads, block_size), block_size>>>(preatt, inp, B, T, C, NH, scale);
    cudaCheck(cudaGetLastError());
    total_threads = B * NH * T;
    attention_softmax_kernel<<<CEIL_DIV(total_threads, block_size), block_size>>>(att, preatt, B, T, NH);
    cudaCheck(cudaGetLastError());
    attention_value_kernel<<<CEIL_DIV(total_threads, block_size), block_size>>>(out, att, inp, B, T, C, NH);
    cudaCheck(cudaGetLastError());
}

static bool run(int B, int T, int C, int NH, bool check) {
    size_t n_inp = (size_t)B * T * 3 * C, n_att = (size_t)B * NH * T * T, n_out = (size_t)B * T * C;
    std::vector<float> inp(n_inp);
    for (auto& v : inp) v = (float)rand() / RAND_MAX * 2.0f - 1.0f;
    float *d_inp, *d_preatt, *d_att, *d_out;
    cudaCheck(cudaMalloc(&d_inp, n_inp * sizeof(float)));
    cudaCheck(cudaMalloc(&d_preatt, n_att * sizeof(float)));
    cudaCheck(cudaMalloc(&d_att, n_att * sizeof(float)));
    cudaCheck(cudaMalloc(&d_out, n_out * sizeof(float)));
    cudaCheck(cudaMemcpy(d_inp, inp.data(), n_inp * sizeof(float), cudaMemcpyHostToDevice));
    attention_forward(d_out, d_preatt, d_att, d_inp, B, T, C, NH, 256);
    cudaCheck(cudaDeviceSynchronize());
    bool ok = true;
    if (check) {  // one output row against the CPU: b = 0, t = T - 1, head 0
        std::vector<float> out(n_out);
        cudaCheck(cudaMemcpy(out.data(), d_out, n_out * sizeof(float), cudaMemcpyDeviceToHost));
        int hs = C / NH, t = T - 1;
        std::vector<double> w(T);
        double m = -1e30, s = 0;
        for (int t2 = 0; t2 <= t; t2++) {
            double d = 0;
            for (int i = 0; i < hs; i++) d += inp[t * 3 * C + i] * inp[t2 * 3 * C + C + i];
            w[t2] = d / sqrt((double)hs);
            m = fmax(m, w[t2]);
        }
        for (int t2 = 0; t2 <= t; t2++) s += (w[t2] = exp(w[t2] - m));
        for (int i = 0; i < hs; i++) {
            double o = 0;
            for (int t2 = 0; t2 <= t; t2++) o += w[t2] / s * inp[t2 * 3 * C + 2 * C + i];
            if (fabs(o - out[t * C + i]) > 1e-4) ok = false;
        }
        printf("B=%d T=%d C=%d NH=%d: %s\n", B, T, C, NH, ok ? "ok" : "MISMATCH");
    }
    cudaFree(d_inp); cudaFree(d_preatt); cudaFree(d_att); cudaFree(d_out);
    return ok;
}

int main() {
    if (!run(2, 64, 768, 12, true)) return 1;  // small check
    run(4, 1024, 768, 12, false);              // GPT-2 small, training sequence length
    return 0;
}
