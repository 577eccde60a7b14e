// trick: writes through a garbage pointer (what an indexing bug or a stale cached pointer does).
// expect: cuda_error
// original: scale_add
// cudaErrorIllegalAddress is sticky: the worker's context is unusable. It answers WorkerError(kind=
// "cuda_error") naming the error and exits; the caller gets a fresh worker.
extern "C" __global__ void scale_add(const float* x, const float* y, float* out, int n) {
    int i = blockIdx.x * blockDim.x + threadIdx.x;
    float* garbage = (float*)0x00000bad0000ull;
    if (i < n) garbage[i] = 3.0f * x[i] + y[i];
}
