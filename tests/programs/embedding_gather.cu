// embedding_gather.cu: GPT-2 style encoder, out[b, t, :] = wte[tokens[b, t], :] + wpe[t, :], four
// channels per thread through float4. Token ids come from a file (tokens.bin, int32) when it exists,
// else random ids. Run for a training batch, then for a single short prompt.
#include <cstdio>
#include <cstdlib>
#include <cuda_runtime.h>

#define VOCAB_SIZE 50257
#define MAX_SEQ_LEN 1024
#define CEIL_DIV(a, b) (((a) + (b) - 1) / (b))
#define FLOAT4(v) (reinterpret_cast<float4*>(&(v))[0])
#define CONST_FLOAT4(v) (reinterpret_cast<const float4*>(&(v))[0])

#define CUDA_CHECK(err)                                                                     \
    do {                                                                                    \
        cudaError_t err_ = (err);                                                           \
        if (err_ != cudaSuccess) {                                                          \
            fprintf(stderr, "CUDA error %d at %s:%d: %s\n", err_, __FILE__, __LINE__, cudaGetErrorString(err_)); \
            exit(1);                                                                        \
        }                                                                                   \
    } while (0)

// C must be a multiple of 4
__global__ void encoder_forward_vec4(float* out, const int* tokens, const float* wte, const float* wpe,
                                     int B, int T, int C) {
    int idx = (blockIdx.x * blockDim.x + threadIdx.x) * 4;
    if (idx >= B * T * C) return;
    int bt = idx / C;
    int c = idx % C;
    int t = bt % T;
    int ix = tokens[bt];
    float4 tok = CONST_FLOAT4(wte[ix * C + c]);
    float4 pos = CONST_FLOAT4(wpe[t * C + c]);
    float4 r;
    r.x = tok.x + pos.x;
    r.y = tok.y + pos.y;
    r.z = tok.z + pos.z;
    r.w = tok.w + pos.w;
    FLOAT4(out[idx]) = r;
}

void encoder_forward(float* out, const int* tokens, const float* wte, const float* wpe, int B, int T, int C,
                     cudaStream_t stream) {
    const int block_size = 256;
    const int N = B * T * C;
    const int grid_size = CEIL_DIV(N / 4, block_size);
    encoder_forward_vec4<<<grid_size, block_size, 0, stream>>>(out, tokens, wte, wpe, B, T, C);
    CUDA_CHECK(cudaGetLastError());
}

static void load_tokens(int* dst, int count) {
    FILE* f = fopen("tokens.bin", "rb");
    size_t got = 0;
    if (f) {
        got = fread(dst, sizeof(int), count, f);
        fclose(f);
    }
    for (size_t i = got; i < (size_t)count; i++) dst[i] = rand() % VOCAB_SIZE;
}

int main() {
    const int C = 768;
    const int train_B = 8, train_T = 1024;
    const int prompt_B = 1, prompt_T = 64;

    size_t wte_bytes = (size_t)VOCAB_SIZE * C * sizeof(float);
    size_t wpe_bytes = (size_t)MAX_SEQ_LEN * C * sizeof(float);
    float* h_wte = (float*)malloc(wte_bytes);
    float* h_wpe = (float*)malloc(wpe_bytes);
    for (size_t i = 0; i < (size_t)VOCAB_SIZE * C; i++) h_wte[i] = 0.02f * ((float)rand() / RAND_MAX - 0.5f);
    for (size_t i = 0; i < (size_t)MAX_SEQ_LEN * C; i++) h_wpe[i] = 0.01f * ((float)rand() / RAND_MAX - 0.5f);
    int* h_tokens = (int*)malloc(train_B * train_T * sizeof(int));
    load_tokens(h_tokens, train_B * train_T);

    float *d_wte, *d_wpe, *d_out;
    int* d_tokens;
    CUDA_CHECK(cudaMalloc(&d_wte, wte_bytes));
    CUDA_CHECK(cudaMalloc(&d_wpe, wpe_bytes));
    CUDA_CHECK(cudaMalloc(&d_tokens, train_B * train_T * sizeof(int)));
    CUDA_CHECK(cudaMalloc(&d_out, (size_t)train_B * train_T * C * sizeof(float)));
    CUDA_CHECK(cudaMemcpy(d_wte, h_wte, wte_bytes, cudaMemcpyHostToDevice));
    CUDA_CHECK(cudaMemcpy(d_wpe, h_wpe, wpe_bytes, cudaMemcpyHostToDevice));
    CUDA_CHECK(cudaMemcpy(d_tokens, h_tokens, train_B * train_T * sizeof(int), cudaMemcpyHostToDevice));

    cudaStream_t stream;
    CUDA_CHECK(cudaStreamCreate(&stream));
    encoder_forward(d_out, d_tokens, d_wte, d_wpe, train_B, train_T, C, stream);    // training batch
    encoder_forward(d_out, d_tokens, d_wte, d_wpe, prompt_B, prompt_T, C, stream);  // one prompt
    CUDA_CHECK(cudaStreamSynchronize(stream));

    float* h_out = (float*)malloc(prompt_B * prompt_T * C * sizeof(float));
    CUDA_CHECK(cudaMemcpy(h_out, d_out, prompt_B * prompt_T * C * sizeof(float), cudaMemcpyDeviceToHost));
    int bad = 0;
    for (int t = 0; t < prompt_T; t++)
        for (int c = 0; c < C; c++) {
            float ref = h_wte[(size_t)h_tokens[t] * C + c] + h_wpe[t * C + c];
            if (h_out[t * C + c] != ref) bad++;
        }
    printf("%s\n", bad ? "MISMATCH" : "OK");

    cudaStreamDestroy(stream);
    cudaFree(d_wte); cudaFree(d_wpe); cudaFree(d_tokens); cudaFree(d_out);
    free(h_wte); free(h_wpe); free(h_tokens); free(h_out);
    return 0;
}
