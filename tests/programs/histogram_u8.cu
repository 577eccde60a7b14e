// histogram_u8.cu: 256-bin histogram of a 100 MB byte buffer, per-block privatized bins in shared
// memory merged with global atomics. The grid is sized from the device (2 blocks per SM) and every
// thread walks the buffer with a grid stride.
#include <stdio.h>
#include <stdlib.h>
#include <cuda_runtime.h>

#define SIZE (100 * 1024 * 1024)
#define NUM_BINS 256

#define HANDLE_ERROR(err) (HandleError(err, __FILE__, __LINE__))
static void HandleError(cudaError_t err, const char* file, int line) {
    if (err != cudaSuccess) {
        printf("%s in %s at line %d\n", cudaGetErrorString(err), file, line);
        exit(EXIT_FAILURE);
    }
}

static unsigned char* random_bytes(int size) {
    unsigned char* data = (unsigned char*)malloc(size);
    if (!data) {
        printf("out of host memory\n");
        exit(EXIT_FAILURE);
    }
    for (int i = 0; i < size; i++) data[i] = (unsigned char)(rand() & 0xff);
    return data;
}

__global__ void histo_shared(const unsigned char* buffer, long size, unsigned int* histo) {
    __shared__ unsigned int bins[NUM_BINS];
    for (int b = threadIdx.x; b < NUM_BINS; b += blockDim.x) bins[b] = 0;
    __syncthreads();

    long i = threadIdx.x + (long)blockIdx.x * blockDim.x;
    long stride = (long)blockDim.x * gridDim.x;
    while (i < size) {
        atomicAdd(&bins[buffer[i]], 1u);
        i += stride;
    }
    __syncthreads();

    for (int b = threadIdx.x; b < NUM_BINS; b += blockDim.x)
        if (bins[b]) atomicAdd(&histo[b], bins[b]);
}

int main(void) {
    unsigned char* buffer = random_bytes(SIZE);

    cudaEvent_t start, stop;
    HANDLE_ERROR(cudaEventCreate(&start));
    HANDLE_ERROR(cudaEventCreate(&stop));

    unsigned char* dev_buffer;
    unsigned int* dev_histo;
    HANDLE_ERROR(cudaMalloc((void**)&dev_buffer, SIZE));
    HANDLE_ERROR(cudaMemcpy(dev_buffer, buffer, SIZE, cudaMemcpyHostToDevice));
    HANDLE_ERROR(cudaMalloc((void**)&dev_histo, NUM_BINS * sizeof(unsigned int)));
    HANDLE_ERROR(cudaMemset(dev_histo, 0, NUM_BINS * sizeof(unsigned int)));

    cudaDeviceProp prop;
    HANDLE_ERROR(cudaGetDeviceProperties(&prop, 0));
    int blocks = prop.multiProcessorCount;

    HANDLE_ERROR(cudaEventRecord(start, 0));
    histo_shared<<<blocks * 2, 256>>>(dev_buffer, SIZE, dev_histo);
    HANDLE_ERROR(cudaEventRecord(stop, 0));
    HANDLE_ERROR(cudaEventSynchronize(stop));

    unsigned int histo[NUM_BINS];
    HANDLE_ERROR(cudaMemcpy(histo, dev_histo, NUM_BINS * sizeof(unsigned int), cudaMemcpyDeviceToHost));
    float elapsed;
    HANDLE_ERROR(cudaEventElapsedTime(&elapsed, start, stop));
    printf("Time to generate: %3.1f ms\n", elapsed);

    long count = 0;
    for (int i = 0; i < NUM_BINS; i++) count += histo[i];
    printf("Histogram sum: %ld (expected %d)\n", count, SIZE);
    for (int i = 0; i < SIZE; i++) histo[buffer[i]]--;
    for (int i = 0; i < NUM_BINS; i++)
        if (histo[i] != 0) printf("Failure at %d!\n", i);

    HANDLE_ERROR(cudaEventDestroy(start));
    HANDLE_ERROR(cudaEventDestroy(stop));
    cudaFree(dev_histo);
    cudaFree(dev_buffer);
    free(buffer);
    return 0;
}
