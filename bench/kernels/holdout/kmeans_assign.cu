// The assignment step of k-means as a clustering homework writes it: one thread per point walks every
// centroid, summing squared differences over the D coordinates, and keeps the nearest (the first one
// on a tie). Each thread re-reads all K * D centroid values from global memory.

/* cuda-agent
[sizes]
N = 262144
D = 32             # 32 MiB of points
K = 64

[args]
# Whole-number coordinates: every squared distance is an exact float in any summation order, so the
# labels (which must match exactly) do not depend on rounding; ties are real and go to the first centroid.
points    = { role = "input",  dtype = "float32", shape = ["N", "D"], init = { dist = "integers", low = -16, high = 16 } }
centroids = { role = "input",  dtype = "float32", shape = ["K", "D"], init = { dist = "integers", low = -16, high = 16 } }
labels    = { role = "output", dtype = "int32",   shape = ["N"] }
N = { role = "scalar", dtype = "int32", value = "N" }
D = { role = "scalar", dtype = "int32", value = "D" }
K = { role = "scalar", dtype = "int32", value = "K" }

[launch]
block = [256]
grid = ["ceil_div(N, block.x)"]

[verify]
sizes = [{ N = 1001, D = 7, K = 13 }]
oracle = { labels = "torch.cdist(points, centroids).argmin(dim=1).int()" }   # argmin: first index of the minimum

[roofline]
flops = "3 * N * K * D"
*/
__global__ void kmeans_assign(const float* points, const float* centroids, int* labels, int N, int D, int K)
{
    int i = blockIdx.x * blockDim.x + threadIdx.x;
    if (i >= N) return;

    float best_dist = 3.402823466e+38f;   // FLT_MAX
    int best = 0;
    for (int k = 0; k < K; k++) {
        float dist = 0.0f;
        for (int d = 0; d < D; d++) {
            float diff = points[i * D + d] - centroids[k * D + d];
            dist += diff * diff;
        }
        if (dist < best_dist) {
            best_dist = dist;
            best = k;
        }
    }
    labels[i] = best;
}
