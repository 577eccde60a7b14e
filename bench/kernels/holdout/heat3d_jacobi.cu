// One explicit (Jacobi) step of the 3-D heat equation on a float grid, as a scientific code's first
// CUDA port writes it: a 2-D block over (x, y), each thread marching up the z column and applying the
// 7-point Laplacian at interior points; boundary points are copied. The IDX macro flattens (i, j, k).

#define IDX(i, j, k) ((k) * ny * nx + (j) * nx + (i))

typedef float real;

/* cuda-agent
[sizes]
nz = 256
ny = 256
nx = 512           # 128 MiB in, 128 MiB out

[args]
u_old = { role = "input",  dtype = "float32", shape = ["nz", "ny", "nx"] }
u_new = { role = "output", dtype = "float32", shape = ["nz", "ny", "nx"] }
nx = { role = "scalar", dtype = "int32", value = "nx" }
ny = { role = "scalar", dtype = "int32", value = "ny" }
nz = { role = "scalar", dtype = "int32", value = "nz" }
r  = { role = "scalar", dtype = "float32", value = 0.1 }   # alpha * dt / dx^2, below the 1/6 stability limit

[launch]
block = [32, 8]
grid = ["ceil_div(nx, block.x)", "ceil_div(ny, block.y)"]

[verify]
sizes = [{ nz = 13, ny = 19, nx = 37 }, { nz = 3, ny = 5, nx = 3 }]
oracle = { u_new = "u_old + F.pad(r * lap, (1, 1, 1, 1, 1, 1))" }

[verify.intermediates]
center = "u_old[1:-1, 1:-1, 1:-1]"
lap = "u_old[1:-1, 1:-1, :-2] + u_old[1:-1, 1:-1, 2:] + u_old[1:-1, :-2, 1:-1] + u_old[1:-1, 2:, 1:-1] + u_old[:-2, 1:-1, 1:-1] + u_old[2:, 1:-1, 1:-1] - 6 * center"

[roofline]
bytes = "8 * nx * ny * nz"
flops = "9 * nx * ny * nz"
*/
__global__ void heat3d_step(const real* u_old, real* u_new, int nx, int ny, int nz, real r)
{
    int i = blockIdx.x * blockDim.x + threadIdx.x;
    int j = blockIdx.y * blockDim.y + threadIdx.y;
    if (i >= nx || j >= ny) return;

    for (int k = 0; k < nz; k++) {
        if (i == 0 || i == nx - 1 || j == 0 || j == ny - 1 || k == 0 || k == nz - 1) {
            u_new[IDX(i, j, k)] = u_old[IDX(i, j, k)];
        } else {
            real c = u_old[IDX(i, j, k)];
            real lap = u_old[IDX(i - 1, j, k)] + u_old[IDX(i + 1, j, k)]
                     + u_old[IDX(i, j - 1, k)] + u_old[IDX(i, j + 1, k)]
                     + u_old[IDX(i, j, k - 1)] + u_old[IDX(i, j, k + 1)]
                     - 6.0f * c;
            u_new[IDX(i, j, k)] = c + r * lap;
        }
    }
}
