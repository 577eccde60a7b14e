// Softmax cross-entropy loss forward per row, as a from-scratch training code's first draft writes
// it: one thread per row makes a max pass and a sum-of-exp pass over the vocabulary and writes
// log(sum) + max - logit[target]. Threads of a warp read rows V floats apart.

#define LOGIT(b, v) logits[(size_t)(b) * V + (v)]

/* cuda-agent
[sizes]
B = 4096
V = 4096           # 64 MiB of logits

[args]
logits  = { role = "input",  dtype = "float32", shape = ["B", "V"], init = { dist = "normal", mean = 0, std = 3 } }
targets = { role = "input",  dtype = "int32",   shape = ["B"], init = { dist = "integers", low = 0, high = "V" } }
loss    = { role = "output", dtype = "float32", shape = ["B"] }
B = { role = "scalar", dtype = "int32", value = "B" }
V = { role = "scalar", dtype = "int32", value = "V" }

[launch]
block = [128]
grid = ["ceil_div(B, block.x)"]

[verify]
sizes = [{ B = 77, V = 1001 }, { B = 5, V = 1 }]
oracle = { loss = "F.cross_entropy(logits, targets.long(), reduction='none')" }
reduction = "V"

[roofline]
flops = "4 * B * V"
*/
__global__ void softmax_xent_forward(const float* logits, const int* targets, float* loss, int B, int V)
{
    int b = blockIdx.x * blockDim.x + threadIdx.x;
    if (b >= B) return;

    float maxval = -INFINITY;
    for (int v = 0; v < V; v++) {
        if (LOGIT(b, v) > maxval) maxval = LOGIT(b, v);
    }

    float sum = 0.0f;
    for (int v = 0; v < V; v++) {
        sum += expf(LOGIT(b, v) - maxval);
    }

    int t = targets[b];
    loss[b] = logf(sum) + maxval - LOGIT(b, t);
}
