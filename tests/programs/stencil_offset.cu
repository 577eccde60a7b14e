// stencil_offset.cu: the classic 1-D stencil exercise, out[i] = sum of in[i - RADIUS .. i + RADIUS],
// with a shared-memory tile of BLOCK_SIZE + 2 * RADIUS ints. The host allocates N + 2 * RADIUS
// elements and launches on pointers offset by RADIUS, so the kernel reads in[-RADIUS] and
// in[N - 1 + RADIUS] without bounds checks: the halo cells are real, padded memory.
#include <stdio.h>
#include <stdlib.h>
#include <cuda_runtime.h>

#define N (2048 * 2048)
#define RADIUS 3
#define BLOCK_SIZE 256

#define CUDA_CHECK(stmt)                                                          \
    do {                                                                          \
        cudaError_t err = stmt;                                                   \
        if (err != cudaSuccess) {                                                 \
            fprintf(stderr, "Failed to run %s: %s\n", #stmt, cudaGetErrorString(err)); \
            return 1;                                                             \
        }                                                                         \
    } while (0)

__global__ void stencil_1d(const int* in, int* out) {
    __shared__ int temp[BLOCK_SIZE + 2 * RADIUS];
    int gindex = threadIdx.x + blockIdx.x * blockDim.x;
    int lindex = threadIdx.x + RADIUS;

    temp[lindex] = in[gindex];
    if (threadIdx.x < RADIUS) {
        temp[lindex - RADIUS] = in[gindex - RADIUS];
        temp[lindex + BLOCK_SIZE] = in[gindex + BLOCK_SIZE];
    }
    __syncthreads();

    int result = 0;
    for (int offset = -RADIUS; offset <= RADIUS; offset++) result += temp[lindex + offset];
    out[gindex] = result;
}

void fill_ints(int* x, int n) {
    for (int i = 0; i < n; i++) x[i] = rand() % 10;
}

int main(void) {
    int *in, *out;
    int *d_in, *d_out;
    int size = (N + 2 * RADIUS) * sizeof(int);

    in = (int*)malloc(size);
    fill_ints(in, N + 2 * RADIUS);
    out = (int*)malloc(size);
    fill_ints(out, N + 2 * RADIUS);

    CUDA_CHECK(cudaMalloc((void**)&d_in, size));
    CUDA_CHECK(cudaMalloc((void**)&d_out, size));
    CUDA_CHECK(cudaMemcpy(d_in, in, size, cudaMemcpyHostToDevice));
    CUDA_CHECK(cudaMemcpy(d_out, out, size, cudaMemcpyHostToDevice));

    stencil_1d<<<N / BLOCK_SIZE, BLOCK_SIZE>>>(d_in + RADIUS, d_out + RADIUS);
    CUDA_CHECK(cudaGetLastError());
    CUDA_CHECK(cudaMemcpy(out, d_out, size, cudaMemcpyDeviceToHost));

    int errors = 0;
    for (int i = RADIUS; i < N + RADIUS; i++) {
        int expected = 0;
        for (int o = -RADIUS; o <= RADIUS; o++) expected += in[i + o];
        if (out[i] != expected) errors++;
    }
    printf("%s (%d errors)\n", errors ? "FAILED" : "PASSED", errors);

    free(in); free(out);
    cudaFree(d_in); cudaFree(d_out);
    return errors != 0;
}
