// A 1-D Gaussian kernel density estimate, the all-pairs version from a statistics code: one thread
// per query point loops over every sample, adding exp(-(q - s)^2 / (2 h^2)) through a small __device__
// helper, then scales by 1 / (M h sqrt(2 pi)).

#define SQRT_2PI 2.50662827463f

/* cuda-agent
[sizes]
N = 16384          # query points
M = 16384          # samples: 268 M pairs

[args]
queries = { role = "input",  dtype = "float32", shape = ["N"], init = { dist = "uniform", low = -4, high = 4 } }
samples = { role = "input",  dtype = "float32", shape = ["M"] }
density = { role = "output", dtype = "float32", shape = ["N"] }
N = { role = "scalar", dtype = "int32", value = "N" }
M = { role = "scalar", dtype = "int32", value = "M" }
h = { role = "scalar", dtype = "float32", value = 0.25 }

[launch]
block = [256]
grid = ["ceil_div(N, block.x)"]

[verify]
sizes = [{ N = 1001, M = 777 }, { N = 3, M = 1 }]
oracle = { density = "torch.exp(-(queries[:, None] - samples[None, :]) ** 2 / (2 * h * h)).sum(1) / (M * h * math.sqrt(2 * math.pi))" }
reduction = "M"

[roofline]
flops = "7 * N * M"
*/
__device__ float gauss_kernel(float u, float h)
{
    return expf(-(u * u) / (2.0f * h * h));
}

__global__ void kde_gaussian(const float* queries, const float* samples, float* density, int N, int M, float h)
{
    int i = blockIdx.x * blockDim.x + threadIdx.x;
    if (i < N) {
        float q = queries[i];
        float sum = 0.0f;
        for (int j = 0; j < M; j++) {
            sum += gauss_kernel(q - samples[j], h);
        }
        density[i] = sum / (M * h * SQRT_2PI);
    }
}
