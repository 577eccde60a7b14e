// Row-wise cosine similarity of two [rows, dim] matrices, written as a templated kernel behind a host
// launcher: one thread per row walks its whole row, accumulating the dot product and both squared
// norms in one loop, so neighbouring threads read addresses dim elements apart.

/* cuda-agent
instantiate = "cosine_rows<float>"
[sizes]
R = 65536
D = 256            # 64 MiB for each of a and b

[args]
a    = { role = "input",  dtype = "float32", shape = ["R", "D"] }
b    = { role = "input",  dtype = "float32", shape = ["R", "D"] }
out  = { role = "output", dtype = "float32", shape = ["R"] }
rows = { role = "scalar", dtype = "int32", value = "R" }
dim  = { role = "scalar", dtype = "int32", value = "D" }
eps  = { role = "scalar", dtype = "float32", value = 1e-8 }

[launch]
block = [256]
grid = ["ceil_div(R, block.x)"]

[verify]
sizes = [{ R = 1001, D = 77 }]
oracle = { out = "(a * b).sum(dim=1) / torch.clamp(a.norm(dim=1) * b.norm(dim=1), min=eps)" }
reduction = "D"

[roofline]
flops = "6 * R * D"
*/
template <typename T>
__global__ void cosine_rows(const T* a, const T* b, T* out, int rows, int dim, T eps)
{
    int row = blockIdx.x * blockDim.x + threadIdx.x;
    if (row >= rows) return;

    T dot = 0, sum_a = 0, sum_b = 0;
    for (int k = 0; k < dim; k++) {
        T x = a[row * dim + k];
        T y = b[row * dim + k];
        dot += x * y;
        sum_a += x * x;
        sum_b += y * y;
    }

    T denom = sqrt(sum_a) * sqrt(sum_b);
    if (denom < eps) denom = eps;
    out[row] = dot / denom;
}

void cosine_similarity_rows(const float* a, const float* b, float* out, int rows, int dim, float eps)
{
    int threads = 256;
    int blocks = (rows + threads - 1) / threads;
    cosine_rows<float><<<blocks, threads>>>(a, b, out, rows, dim, eps);
}
