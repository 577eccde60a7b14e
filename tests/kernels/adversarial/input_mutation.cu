// trick: writes into its input x (zeroing inputs is a known way to make a later comparison pass or to
// speed up a following run); the output itself is right.
// expect: input_modified
// original: scale_add
// x is compared bit for bit with its copy after the run: it is not declared inout.
extern "C" __global__ void scale_add(const float* x, const float* y, float* out, int n) {
    int i = blockIdx.x * blockDim.x + threadIdx.x;
    if (i < n) {
        out[i] = 3.0f * x[i] + y[i];
        ((float*)x)[i] = 0.0f;
    }
}
