// transpose_tiled.cu: out-of-place matrix transpose, a naive version and a shared-memory tiled one
// (TILE_DIM x TILE_DIM tiles, each thread handles TILE_DIM / BLOCK_ROWS elements, a padded tile
// against bank conflicts). The kernels take no size arguments: the width comes from gridDim, so the
// matrix sides must be multiples of TILE_DIM.
#include <stdio.h>
#include <stdlib.h>
#include <assert.h>
#include <string.h>
#include <cuda_runtime.h>

#define TILE_DIM 32
#define BLOCK_ROWS 8
#define NUM_REPS 100

inline cudaError_t checkCuda(cudaError_t result) {
    if (result != cudaSuccess) {
        fprintf(stderr, "CUDA Runtime Error: %s\n", cudaGetErrorString(result));
        assert(result == cudaSuccess);
    }
    return result;
}

// idata is height x width (row-major), odata is width x height
__global__ void transposeNaive(float* odata, const float* idata) {
    int x = blockIdx.x * TILE_DIM + threadIdx.x;
    int y = blockIdx.y * TILE_DIM + threadIdx.y;
    int width = gridDim.x * TILE_DIM;
    int height = gridDim.y * TILE_DIM;
    for (int j = 0; j < TILE_DIM; j += BLOCK_ROWS) odata[x * height + (y + j)] = idata[(y + j) * width + x];
}

__global__ void transposeTiled(float* odata, const float* idata) {
    __shared__ float tile[TILE_DIM][TILE_DIM + 1];
    int x = blockIdx.x * TILE_DIM + threadIdx.x;
    int y = blockIdx.y * TILE_DIM + threadIdx.y;
    int width = gridDim.x * TILE_DIM;
    int height = gridDim.y * TILE_DIM;

    for (int j = 0; j < TILE_DIM; j += BLOCK_ROWS) tile[threadIdx.y + j][threadIdx.x] = idata[(y + j) * width + x];
    __syncthreads();

    x = blockIdx.y * TILE_DIM + threadIdx.x;  // transposed block offset
    y = blockIdx.x * TILE_DIM + threadIdx.y;
    for (int j = 0; j < TILE_DIM; j += BLOCK_ROWS) odata[(y + j) * height + x] = tile[threadIdx.x][threadIdx.y + j];
}

int main(int argc, char** argv) {
    const int nx = 8192;  // width
    const int ny = 4096;  // height
    const int mem_size = nx * ny * sizeof(float);

    dim3 dimGrid(nx / TILE_DIM, ny / TILE_DIM, 1);
    dim3 dimBlock(TILE_DIM, BLOCK_ROWS, 1);
    if (nx % TILE_DIM || ny % TILE_DIM) {
        printf("nx and ny must be a multiple of TILE_DIM\n");
        return 1;
    }
    printf("Matrix size: %d x %d, tile %d x %d, block %d x %d\n", nx, ny, TILE_DIM, TILE_DIM, TILE_DIM, BLOCK_ROWS);

    float* h_idata = (float*)malloc(mem_size);
    float* h_tdata = (float*)malloc(mem_size);
    float* gold = (float*)malloc(mem_size);
    float *d_idata, *d_tdata;
    checkCuda(cudaMalloc(&d_idata, mem_size));
    checkCuda(cudaMalloc(&d_tdata, mem_size));

    for (int j = 0; j < ny; j++)
        for (int i = 0; i < nx; i++) h_idata[j * nx + i] = j * nx + i;
    for (int j = 0; j < ny; j++)
        for (int i = 0; i < nx; i++) gold[i * ny + j] = h_idata[j * nx + i];
    checkCuda(cudaMemcpy(d_idata, h_idata, mem_size, cudaMemcpyHostToDevice));

    cudaEvent_t startEvent, stopEvent;
    checkCuda(cudaEventCreate(&startEvent));
    checkCuda(cudaEventCreate(&stopEvent));
    float ms;

    // naive
    checkCuda(cudaMemset(d_tdata, 0, mem_size));
    transposeNaive<<<dimGrid, dimBlock>>>(d_tdata, d_idata);
    checkCuda(cudaEventRecord(startEvent, 0));
    for (int i = 0; i < NUM_REPS; i++) transposeNaive<<<dimGrid, dimBlock>>>(d_tdata, d_idata);
    checkCuda(cudaEventRecord(stopEvent, 0));
    checkCuda(cudaEventSynchronize(stopEvent));
    checkCuda(cudaEventElapsedTime(&ms, startEvent, stopEvent));
    checkCuda(cudaMemcpy(h_tdata, d_tdata, mem_size, cudaMemcpyDeviceToHost));
    printf("%25s %10.2f GB/s %s\n", "naive transpose", 2e-6 * mem_size * NUM_REPS / ms,
           memcmp(h_tdata, gold, mem_size) ? "FAILED" : "ok");

    // tiled
    checkCuda(cudaMemset(d_tdata, 0, mem_size));
    transposeTiled<<<dimGrid, dimBlock>>>(d_tdata, d_idata);
    checkCuda(cudaEventRecord(startEvent, 0));
    for (int i = 0; i < NUM_REPS; i++) transposeTiled<<<dimGrid, dimBlock>>>(d_tdata, d_idata);
    checkCuda(cudaEventRecord(stopEvent, 0));
    checkCuda(cudaEventSynchronize(stopEvent));
    checkCuda(cudaEventElapsedTime(&ms, startEvent, stopEvent));
    checkCuda(cudaMemcpy(h_tdata, d_tdata, mem_size, cudaMemcpyDeviceToHost));
    printf("%25s %10.2f GB/s %s\n", "tiled transpose", 2e-6 * mem_size * NUM_REPS / ms,
           memcmp(h_tdata, gold, mem_size) ? "FAILED" : "ok");

    checkCuda(cudaEventDestroy(startEvent));
    checkCuda(cudaEventDestroy(stopEvent));
    checkCuda(cudaFree(d_tdata));
    checkCuda(cudaFree(d_idata));
    free(h_idata); free(h_tdata); free(gold);
    return 0;
}
