// An RBF (Gaussian) kernel matrix of one point set against itself, spelled with powf and a flat
// thread index, the way an SVM or Gaussian-process course exercise writes it.
/* cuda-agent
[sizes]
N = 2048
D = 32

[args]
K = { role = "output", dtype = "float32", shape = ["N", "N"] }
X = { role = "input", dtype = "float32", shape = ["N", "D"] }
gamma = { role = "scalar", dtype = "float32", value = "0.05" }
N = { role = "scalar", dtype = "int32", value = "N" }
D = { role = "scalar", dtype = "int32", value = "D" }

[launch]
block = [256]
grid = ["ceil_div(N * N, 256)"]

[verify]
sizes = [{ N = 45, D = 7 }]
oracle = { K = "torch.exp(-gamma * torch.cdist(X, X) ** 2)" }
reduction = "D"
*/
__global__ void rbf_kernel(float* K, const float* X, float gamma, int N, int D)
{
    int idx = blockIdx.x * blockDim.x + threadIdx.x;
    if (idx >= N * N) return;
    int i = idx / N;
    int j = idx % N;
    float s = 0.0f;
    for (int k = 0; k < D; k++)
        s += powf(X[i * D + k] - X[j * D + k], 2.0f);
    K[idx] = expf(-gamma * s);
}
