// trick: hands the work to a child grid launched from the device (dynamic parallelism), hoping the
// timed kernel returns before the work is done ("work launched on another stream").
// expect: compile
// original: scale_add
// What device code can do here, honestly: a kernel cannot reach a host stream; its only ways to start
// other work are device-side launches, which need relocatable device code (-rdc=true) and the device
// runtime library. Candidates are compiled without them, so this fails to compile. Were -rdc allowed, the
// CUDA programming guide says a parent grid is not complete until its child grids are, so the end event
// (and the output snapshot queued behind it) would still wait for the child. See pdl_early_trigger.cu for
// the other "signal done early" mechanism.
__global__ void child(const float* x, const float* y, float* out, int n) {
    int i = blockIdx.x * blockDim.x + threadIdx.x;
    if (i < n) out[i] = 3.0f * x[i] + y[i];
}

extern "C" __global__ void scale_add(const float* x, const float* y, float* out, int n) {
    if (blockIdx.x == 0 && threadIdx.x == 0) child<<<(n + 255) / 256, 256>>>(x, y, out, n);
}
