// Mean pooling over the sequence of a (B, T, C) activation, one thread per (b, c) summing its T values:
// the loads are coalesced across c, but only B * C = 12,288 threads run, each a 1024-step chain.

/* cuda-agent
[sizes]
B = 16
T = 1024
C = 768            # 48 MiB in

[args]
out = { role = "output", dtype = "float32", shape = ["B", "C"] }
inp = { role = "input",  dtype = "float32", shape = ["B", "T", "C"] }
B = { role = "scalar", dtype = "int32", value = "B" }
T = { role = "scalar", dtype = "int32", value = "T" }
C = { role = "scalar", dtype = "int32", value = "C" }

[launch]
block = [256]
grid = ["ceil_div(B * C, block.x)"]

[verify]
sizes = [{ B = 3, T = 77, C = 99 }]
oracle = { out = "inp.mean(1)" }
reduction = "T"

[roofline]
flops = "B * T * C"
*/
__global__ void mean_over_time(float* out, const float* inp, int B, int T, int C)
{
    int idx = blockIdx.x * blockDim.x + threadIdx.x;
    if (idx < B * C) {
        int b = idx / C;
        int c = idx % C;
        float sum = 0.0f;
        for (int t = 0; t < T; t++) {
            sum += inp[b * T * C + t * C + c];
        }
        out[idx] = sum / T;
    }
}
