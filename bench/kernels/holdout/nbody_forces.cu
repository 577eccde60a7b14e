// All-pairs gravitational accelerations as the classic n-body exercise writes them: one thread per body
// looping over every other body's coordinates in structure-of-arrays form, with a softening term so
// that a body's pull on itself is zero.

/* cuda-agent
[sizes]
n = 16384

[args]
x    = { role = "input",  dtype = "float32", shape = ["n"] }
y    = { role = "input",  dtype = "float32", shape = ["n"] }
z    = { role = "input",  dtype = "float32", shape = ["n"] }
mass = { role = "input",  dtype = "float32", shape = ["n"], init = { dist = "uniform", low = 0.5, high = 1.5 } }
ax   = { role = "output", dtype = "float32", shape = ["n"] }
ay   = { role = "output", dtype = "float32", shape = ["n"] }
az   = { role = "output", dtype = "float32", shape = ["n"] }
n = { role = "scalar", dtype = "int32", value = "n" }
softening = { role = "scalar", dtype = "float32", value = 0.01 }

[launch]
block = [256]
grid = ["ceil_div(n, block.x)"]

[verify]
sizes = [{ n = 517 }]
oracle = { ax = "((x[None, :] - x[:, None]) * mass[None, :] * torch.rsqrt((x[None, :] - x[:, None]) ** 2 + (y[None, :] - y[:, None]) ** 2 + (z[None, :] - z[:, None]) ** 2 + softening) ** 3).sum(1)", ay = "((y[None, :] - y[:, None]) * mass[None, :] * torch.rsqrt((x[None, :] - x[:, None]) ** 2 + (y[None, :] - y[:, None]) ** 2 + (z[None, :] - z[:, None]) ** 2 + softening) ** 3).sum(1)", az = "((z[None, :] - z[:, None]) * mass[None, :] * torch.rsqrt((x[None, :] - x[:, None]) ** 2 + (y[None, :] - y[:, None]) ** 2 + (z[None, :] - z[:, None]) ** 2 + softening) ** 3).sum(1)" }
reduction = "n"
tolerance = { atol = 1e-3, rtol = 1e-3 }

[roofline]
flops = "20 * n * n"
*/
__global__ void body_force(const float* x, const float* y, const float* z, const float* mass,
                           float* ax, float* ay, float* az, int n, float softening)
{
    int i = blockDim.x * blockIdx.x + threadIdx.x;
    if (i < n) {
        float Fx = 0.0f, Fy = 0.0f, Fz = 0.0f;
        for (int j = 0; j < n; j++) {
            float dx = x[j] - x[i];
            float dy = y[j] - y[i];
            float dz = z[j] - z[i];
            float distSqr = dx * dx + dy * dy + dz * dz + softening;
            float invDist = rsqrtf(distSqr);
            float invDist3 = invDist * invDist * invDist;
            Fx += mass[j] * dx * invDist3;
            Fy += mass[j] * dy * invDist3;
            Fz += mass[j] * dz * invDist3;
        }
        ax[i] = Fx;
        ay[i] = Fy;
        az[i] = Fz;
    }
}
