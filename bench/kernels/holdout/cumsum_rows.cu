// Inclusive prefix sum along each row of a matrix, the obvious first version: one thread per row adds
// up its L values in order and writes every running total. Neighbouring threads of a warp touch
// addresses a whole row (4 KiB) apart, so no load or store is coalesced.

/* cuda-agent
[sizes]
R = 8192
L = 1024           # 32 MiB in, 32 MiB out

[args]
x   = { role = "input",  dtype = "float32", shape = ["R", "L"] }
out = { role = "output", dtype = "float32", shape = ["R", "L"] }
R = { role = "scalar", dtype = "int32", value = "R" }
L = { role = "scalar", dtype = "int32", value = "L" }

[launch]
block = [128]
grid = ["ceil_div(R, block.x)"]

[verify]
sizes = [{ R = 77, L = 333 }]
oracle = { out = "torch.cumsum(x, dim=1)" }
reduction = "L"    # the last column is a sum of L terms, added in any order by a faster scan

[roofline]
flops = "R * L"
*/
__global__ void cumsum_rows(const float* x, float* out, int R, int L)
{
    int row = blockIdx.x * blockDim.x + threadIdx.x;
    if (row < R) {
        float running = 0.0f;
        for (int j = 0; j < L; j++) {
            running += x[row * L + j];
            out[row * L + j] = running;
        }
    }
}
