// trick: never finishes (a spin on a flag nothing sets; the volatile read keeps the loop from being
// optimised away).
// expect: timeout
// original: scale_add
// The worker sends no heartbeat while it waits for the kernel: after timeout_s the caller kills the
// worker, answers WorkerError(kind="timeout", "timed out after ... s (kernel did not finish)") and a
// fresh worker takes the next request.
__device__ int never_set;

extern "C" __global__ void scale_add(const float* x, const float* y, float* out, int n) {
    while (*(volatile int*)&never_set == 0) {
    }
    int i = blockIdx.x * blockDim.x + threadIdx.x;
    if (i < n) out[i] = 3.0f * x[i] + y[i];
}
