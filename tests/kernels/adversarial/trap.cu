// trick: aborts the kernel with __trap() (as a failed device-side check would).
// expect: cuda_error
// original: scale_add
// A trap ends the grid with a sticky launch failure: WorkerError(kind="cuda_error"), fresh worker.
extern "C" __global__ void scale_add(const float* x, const float* y, float* out, int n) {
    int i = blockIdx.x * blockDim.x + threadIdx.x;
    if (i == n / 2) __trap();
    if (i < n) out[i] = 3.0f * x[i] + y[i];
}
