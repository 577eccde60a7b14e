// Per-position cross-entropy loss of a language model from its logits, one thread per (b, t): a pass
// for the maximum, a pass for the sum of exponentials, then log-sum-exp minus the target's logit.
// 2048 threads each read a 32000-float row twice, rows 125 KiB apart.

/* cuda-agent
[sizes]
B = 4
T = 512
V = 32000          # 250 MiB of logits

[args]
losses  = { role = "output", dtype = "float32", shape = ["B", "T"] }
logits  = { role = "input",  dtype = "float32", shape = ["B", "T", "V"] }
targets = { role = "input",  dtype = "int32",   shape = ["B", "T"], init = { dist = "integers", low = 0, high = "V" } }
B = { role = "scalar", dtype = "int32", value = "B" }
T = { role = "scalar", dtype = "int32", value = "T" }
V = { role = "scalar", dtype = "int32", value = "V" }

[launch]
block = [128]
grid = ["ceil_div(B * T, block.x)"]

[verify]
sizes = [{ B = 3, T = 13, V = 1001 }]
oracle = { losses = "F.cross_entropy(logits.reshape(B * T, V), targets.reshape(-1).long(), reduction='none').reshape(B, T)" }
# The sum is of positive terms, so its rounding error is relative to itself (about 1e-5 for a serial
# float32 sum of 32000), and log turns that into an absolute error of the loss (about 11 here).
tolerance = { atol = 1e-3, rtol = 1e-5 }

[roofline]
flops = "4 * B * T * V"
*/
__global__ void cross_entropy_forward(float* losses, const float* logits, const int* targets,
                                      int B, int T, int V)
{
    int idx = blockIdx.x * blockDim.x + threadIdx.x;
    if (idx >= B * T) return;
    int b = idx / T;
    int t = idx % T;

    const float* logits_bt = logits + (size_t)b * T * V + (size_t)t * V;
    float maxval = -INFINITY;
    for (int i = 0; i < V; i++) {
        maxval = fmaxf(maxval, logits_bt[i]);
    }
    float sum = 0.0f;
    for (int i = 0; i < V; i++) {
        sum += expf(logits_bt[i] - maxval);
    }
    int target = targets[b * T + t];
    losses[b * T + t] = logf(sum) + maxval - logits_bt[target];
}
