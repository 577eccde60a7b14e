// Pairwise squared Euclidean distances between two point sets, as a kNN or RBF-kernel first draft
// writes them: one thread per (query, reference) pair, the difference kept in a local.
/* cuda-agent
[sizes]
Q = 1024
R = 2048
D = 64

[args]
dist = { role = "output", dtype = "float32", shape = ["Q", "R"] }
query = { role = "input", dtype = "float32", shape = ["Q", "D"] }
ref = { role = "input", dtype = "float32", shape = ["R", "D"] }
Q = { role = "scalar", dtype = "int32", value = "Q" }
R = { role = "scalar", dtype = "int32", value = "R" }
D = { role = "scalar", dtype = "int32", value = "D" }

[launch]
block = [16, 16]
grid = ["ceil_div(R, 16)", "ceil_div(Q, 16)"]

[verify]
sizes = [{ Q = 37, R = 53, D = 19 }]
oracle = { dist = "torch.cdist(query, ref) ** 2" }
reduction = "D"
*/
__global__ void squared_distances(float* dist, const float* query, const float* ref, int Q, int R, int D)
{
    int q = blockIdx.y * blockDim.y + threadIdx.y;
    int r = blockIdx.x * blockDim.x + threadIdx.x;
    if (q < Q && r < R) {
        float acc = 0.0f;
        for (int d = 0; d < D; ++d) {
            float diff = query[q * D + d] - ref[r * D + d];
            acc += diff * diff;
        }
        dist[q * R + r] = acc;
    }
}
