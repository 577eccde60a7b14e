// A header-only kernel, included by the files that launch it.
#pragma once

/* cuda-agent
[sizes]
n = 4_194_304

[args]
x = { role = "inout", dtype = "float32", shape = ["n"] }
lo = { role = "scalar", dtype = "float32", value = -1 }
hi = { role = "scalar", dtype = "float32", value = 1 }
n = { role = "scalar", dtype = "int32", value = "n" }

[launch]
block = [512]
grid = ["ceil_div(n, block.x)"]

[verify]
sizes = [{ n = 77_777 }]
oracle = { x = "torch.clamp(x, lo, hi)" }
*/
__global__ void clamp_inplace(float* x, float lo, float hi, int n)
{
    int i = blockIdx.x * blockDim.x + threadIdx.x;
    if (i < n) x[i] = fminf(fmaxf(x[i], lo), hi);
}
