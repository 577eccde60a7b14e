// Element-wise kernels, as a first draft usually looks.

// No spec: cuda-agent infers one from the (const float* in, float* out, int n) shape.
__global__ void relu(const float* x, float* y, int n)
{
    int i = blockIdx.x * blockDim.x + threadIdx.x;
    if (i < n) {
        y[i] = x[i] > 0.0f ? x[i] : 0.0f;
    }
}

/* cuda-agent
[sizes]
n = 16_777_216

[args]
a = { role = "scalar", dtype = "float32", value = 2 }
x = { role = "input", dtype = "float32", shape = ["n"] }
y = { role = "inout", dtype = "float32", shape = ["n"] }
n = { role = "scalar", dtype = "int32", value = "n" }

[launch]
block = [128]
grid = ["ceil_div(n, block.x)"]

[verify]
sizes = [{ n = 1_000_003 }]
oracle = { y = "a * x + y" }
*/
__global__ void saxpy(float a, const float* x, float* y, int n)
{
    int i = blockIdx.x * blockDim.x + threadIdx.x;
    if (i < n) y[i] = a * x[i] + y[i];
}
