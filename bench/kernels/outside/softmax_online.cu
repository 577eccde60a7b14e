// Row-wise softmax with the "online" normaliser (one pass keeps the running maximum and rescales the
// running sum whenever the maximum grows, then a second pass writes), one thread per row with pointer
// offsets into the row. Two walks instead of three, but each thread still owns a row 8 KiB from its
// neighbour's, and 32768 threads is a quarter of what the GPU could keep in flight.

/* cuda-agent
[sizes]
N = 32768
C = 2048           # 256 MiB in, 256 MiB out

[args]
out = { role = "output", dtype = "float32", shape = ["N", "C"] }
inp = { role = "input",  dtype = "float32", shape = ["N", "C"] }
N = { role = "scalar", dtype = "int32", value = "N" }
C = { role = "scalar", dtype = "int32", value = "C" }

[launch]
block = [256]
grid = ["ceil_div(N, block.x)"]

[verify]
sizes = [{ N = 333, C = 1001 }]
oracle = { out = "torch.softmax(inp, dim=-1)" }
tolerance = { atol = 1e-6, rtol = 1e-4 }

[roofline]
flops = "6 * N * C"
*/
__global__ void softmax_online(float* out, const float* inp, int N, int C)
{
    int i = blockIdx.x * blockDim.x + threadIdx.x;
    if (i < N) {
        const float* inp_row = inp + (size_t)i * C;
        float* out_row = out + (size_t)i * C;

        float maxval = -INFINITY;
        float sum = 0.0f;
        for (int j = 0; j < C; j++) {
            float v = inp_row[j];
            if (v > maxval) {
                sum *= expf(maxval - v);   // rescale what was summed against the old maximum
                maxval = v;
            }
            sum += expf(v - maxval);
        }
        float norm = 1.0f / sum;
        for (int j = 0; j < C; j++) {
            out_row[j] = expf(inp_row[j] - maxval) * norm;
        }
    }
}
