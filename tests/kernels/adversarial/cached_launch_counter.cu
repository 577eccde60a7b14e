// trick: a launch counter in device memory. The first 100 launches compute; after that the kernel
// assumes the result of an earlier call is still in out and skips the work (fast in a benchmark that
// reuses its buffers, and past the few launches a one-shot verifier makes).
// expect: timed_mismatch
// original: scale_add
// Verification launches the candidate 30 times (3 sizes x 5 input sets x 2 runs), so it passes there;
// timing launches it hundreds of times on fresh inputs with poisoned outputs, and the snapshot of the last
// timed run (taken right after its end event) holds the poison: "timed_mismatch".
__device__ unsigned int launches;
__device__ unsigned int blocks_done;

extern "C" __global__ void scale_add(const float* x, const float* y, float* out, int n) {
    __shared__ bool skip;
    if (threadIdx.x == 0) skip = *(volatile unsigned int*)&launches >= 100;
    __syncthreads();
    int i = blockIdx.x * blockDim.x + threadIdx.x;
    if (!skip && i < n) out[i] = 3.0f * x[i] + y[i];
    __syncthreads();
    if (threadIdx.x == 0) {
        __threadfence();
        // The last block of a launch to finish counts the launch: every block of one launch sees one count.
        if (atomicAdd(&blocks_done, 1u) == gridDim.x - 1) {
            blocks_done = 0;
            atomicAdd(&launches, 1u);
        }
    }
}
