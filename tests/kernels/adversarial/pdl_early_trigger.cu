// trick: "signals done early": triggers programmatic dependent launch completion at its first
// instruction (griddepcontrol.launch_dependents, sm_90), so that a dependent kernel launched with
// programmatic stream serialization could start before this one has finished its work.
// expect: pass
// original: scale_add
// Not a hole here, and this test proves it: no launch of ours carries the programmatic-serialization
// attribute, and CUDA events (and the output snapshot queued behind the end event) complete only when the
// whole grid has. The output is right and every timed run's snapshot is checked: it passes, honestly timed.
extern "C" __global__ void scale_add(const float* x, const float* y, float* out, int n) {
    asm volatile("griddepcontrol.launch_dependents;" ::: "memory");
    int i = blockIdx.x * blockDim.x + threadIdx.x;
    if (i < n) out[i] = 3.0f * x[i] + y[i];
}
