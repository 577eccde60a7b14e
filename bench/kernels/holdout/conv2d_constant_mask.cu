// A course's 2-D convolution with its mask in constant memory (the host fills it with
// cudaMemcpyToSymbol): no spec written, so the kernel's arguments are inferred and the mask is
// whatever the sandbox puts there.
#define MASK_DIM 7
#define MASK_OFFSET (MASK_DIM / 2)

__constant__ float mask[MASK_DIM * MASK_DIM];

__global__ void convolution_2d(const float* matrix, float* result, int N)
{
    int row = blockIdx.y * blockDim.y + threadIdx.y;
    int col = blockIdx.x * blockDim.x + threadIdx.x;
    int start_r = row - MASK_OFFSET;
    int start_c = col - MASK_OFFSET;
    float temp = 0.0f;
    for (int i = 0; i < MASK_DIM; i++) {
        for (int j = 0; j < MASK_DIM; j++) {
            if ((start_r + i) >= 0 && (start_r + i) < N) {
                if ((start_c + j) >= 0 && (start_c + j) < N) {
                    temp += matrix[(start_r + i) * N + (start_c + j)] * mask[i * MASK_DIM + j];
                }
            }
        }
    }
    if (row < N && col < N) result[row * N + col] = temp;
}

int main()
{
    const int N = 4096;
    float *d_matrix, *d_result;
    cudaMalloc(&d_matrix, N * N * sizeof(float));
    cudaMalloc(&d_result, N * N * sizeof(float));
    float h_mask[MASK_DIM * MASK_DIM];
    for (int i = 0; i < MASK_DIM * MASK_DIM; i++) h_mask[i] = 1.0f / (MASK_DIM * MASK_DIM);
    cudaMemcpyToSymbol(mask, h_mask, sizeof(h_mask));
    dim3 threads(16, 16);
    dim3 blocks((N + 15) / 16, (N + 15) / 16);
    convolution_2d<<<blocks, threads>>>(d_matrix, d_result, N);
    cudaDeviceSynchronize();
    return 0;
}
