// rgba_to_gray.cu: RGBA image to 8-bit luminance, one thread per pixel over a 2-D grid of 16 x 16
// blocks. The channel weights live in constant memory, uploaded once with cudaMemcpyToSymbol (so a
// different standard, BT.601 or BT.709, needs no recompile). The image is a synthetic 4K frame.
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <cuda_runtime.h>

#define checkCudaErrors(val) check((val), #val, __FILE__, __LINE__)
template <typename T>
void check(T err, const char* const func, const char* const file, const int line) {
    if (err != cudaSuccess) {
        fprintf(stderr, "CUDA error at: %s:%d\n%s %s\n", file, line, cudaGetErrorString(err), func);
        exit(1);
    }
}

__constant__ float c_weights[3];

__global__ void rgba_to_greyscale(const uchar4* const rgbaImage, unsigned char* const greyImage, int numRows,
                                  int numCols) {
    const int x = blockIdx.x * blockDim.x + threadIdx.x;
    const int y = blockIdx.y * blockDim.y + threadIdx.y;
    if (x >= numCols || y >= numRows) return;
    const uchar4 px = rgbaImage[y * numCols + x];
    const float lum = c_weights[0] * px.x + c_weights[1] * px.y + c_weights[2] * px.z;
    greyImage[y * numCols + x] = (unsigned char)fminf(lum + 0.5f, 255.0f);
}

int main() {
    const size_t numRows = 2160, numCols = 3840;
    const size_t numPixels = numRows * numCols;
    const float bt601[3] = {0.299f, 0.587f, 0.114f};

    uchar4* h_rgba = (uchar4*)malloc(numPixels * sizeof(uchar4));
    unsigned char* h_grey = (unsigned char*)malloc(numPixels);
    for (size_t i = 0; i < numPixels; ++i)
        h_rgba[i] = make_uchar4(rand() % 256, rand() % 256, rand() % 256, 255);

    uchar4* d_rgba;
    unsigned char* d_grey;
    checkCudaErrors(cudaMalloc(&d_rgba, sizeof(uchar4) * numPixels));
    checkCudaErrors(cudaMalloc(&d_grey, sizeof(unsigned char) * numPixels));
    checkCudaErrors(cudaMemset(d_grey, 0, numPixels * sizeof(unsigned char)));
    checkCudaErrors(cudaMemcpy(d_rgba, h_rgba, sizeof(uchar4) * numPixels, cudaMemcpyHostToDevice));
    checkCudaErrors(cudaMemcpyToSymbol(c_weights, bt601, sizeof(bt601)));

    const dim3 blockSize(16, 16, 1);
    const dim3 gridSize((numCols + blockSize.x - 1) / blockSize.x, (numRows + blockSize.y - 1) / blockSize.y, 1);
    rgba_to_greyscale<<<gridSize, blockSize>>>(d_rgba, d_grey, numRows, numCols);
    cudaDeviceSynchronize();
    checkCudaErrors(cudaGetLastError());
    checkCudaErrors(cudaMemcpy(h_grey, d_grey, numPixels, cudaMemcpyDeviceToHost));

    int mismatches = 0;
    for (size_t i = 0; i < numPixels; ++i) {
        float lum = bt601[0] * h_rgba[i].x + bt601[1] * h_rgba[i].y + bt601[2] * h_rgba[i].z;
        int ref = (int)fminf(lum + 0.5f, 255.0f);
        if (abs(ref - (int)h_grey[i]) > 1) mismatches++;
    }
    printf("%zu x %zu: %d mismatches\n", numCols, numRows, mismatches);
    cudaFree(d_rgba); cudaFree(d_grey);
    free(h_rgba); free(h_grey);
    return 0;
}
