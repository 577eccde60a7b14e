// trick: a result cache keyed on the argument pointers: called again with the same buffers, it assumes
// out still holds the answer and returns at once (what a benchmark that reuses buffers rewards).
// expect: unwritten
// original: scale_add
// Each input set is run twice in the same buffers with outputs poisoned by different bytes: the second
// run leaves its poison where the first run wrote, "written in only one of two runs". (Timing could not
// be fooled either: outputs are poisoned and inputs fresh before every timed launch.)
__device__ const float* cached_x;
__device__ const float* cached_y;
__device__ float* cached_out;
__device__ int cached_n;
__device__ unsigned int blocks_done;

extern "C" __global__ void scale_add(const float* x, const float* y, float* out, int n) {
    __shared__ bool hit;
    if (threadIdx.x == 0) {
        hit = *(const float* volatile*)&cached_x == x && *(const float* volatile*)&cached_y == y
              && *(float* volatile*)&cached_out == out && *(volatile int*)&cached_n == n;
    }
    __syncthreads();
    if (hit) return;
    int i = blockIdx.x * blockDim.x + threadIdx.x;
    if (i < n) out[i] = 3.0f * x[i] + y[i];
    __syncthreads();
    if (threadIdx.x == 0) {
        __threadfence();
        if (atomicAdd(&blocks_done, 1u) == gridDim.x - 1) {  // the launch is complete: remember it
            blocks_done = 0;
            cached_x = x;
            cached_y = y;
            cached_out = out;
            cached_n = n;
        }
    }
}
