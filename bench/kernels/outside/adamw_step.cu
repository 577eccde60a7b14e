// One AdamW step over a flat parameter buffer, one thread per parameter, the moments and the
// parameters updated in place (bias corrections computed on the host, as training loops pass them).
// Seven float streams a parameter: memory-bound, with the scalar loads and stores of a first draft.

/* cuda-agent
[sizes]
n = "1 << 24"      # 16M parameters: 4 buffers of 64 MiB, 448 MiB of traffic

[args]
params = { role = "inout", dtype = "float32", shape = ["n"] }
grads  = { role = "input", dtype = "float32", shape = ["n"] }
m      = { role = "inout", dtype = "float32", shape = ["n"], init = { dist = "normal", mean = 0, std = 0.1 } }
v      = { role = "inout", dtype = "float32", shape = ["n"], init = { dist = "uniform", low = 0, high = 0.01 } }
num_params = { role = "scalar", dtype = "int64", value = "n" }
lr         = { role = "scalar", dtype = "float32", value = 1e-3 }
beta1      = { role = "scalar", dtype = "float32", value = 0.9 }
beta2      = { role = "scalar", dtype = "float32", value = 0.999 }
beta1_correction = { role = "scalar", dtype = "float32", value = "1 - 0.9 ** 10" }    # step t = 10
beta2_correction = { role = "scalar", dtype = "float32", value = "1 - 0.999 ** 10" }
eps          = { role = "scalar", dtype = "float32", value = 1e-8 }
weight_decay = { role = "scalar", dtype = "float32", value = 0.01 }

[launch]
block = [512]
grid = ["ceil_div(n, block.x)"]

[verify]
sizes = [{ n = 1_000_003 }]
oracle = { m = "m_new", v = "v_new", params = "params - lr * (m_hat / (torch.sqrt(v_hat) + eps) + weight_decay * params)" }
# The update is about lr = 1e-3 of a parameter: the default float32 atol (1e-4) would pass a step that
# is 10% wrong. Every value here is a few roundings from exact.
tolerance = { atol = 1e-6, rtol = 1e-5 }

[verify.intermediates]
m_new = "beta1 * m + (1 - beta1) * grads"
v_new = "beta2 * v + (1 - beta2) * grads * grads"
m_hat = "m_new / beta1_correction"
v_hat = "v_new / beta2_correction"

[roofline]
flops = "16 * n"
*/
__global__ void adamw_step(float* params, const float* grads, float* m, float* v, long num_params,
                           float lr, float beta1, float beta2, float beta1_correction,
                           float beta2_correction, float eps, float weight_decay)
{
    int i = blockIdx.x * blockDim.x + threadIdx.x;
    if (i >= num_params) return;

    float g = grads[i];
    float m_i = beta1 * m[i] + (1.0f - beta1) * g;
    float v_i = beta2 * v[i] + (1.0f - beta2) * g * g;
    m[i] = m_i;
    v[i] = v_i;

    float m_hat = m_i / beta1_correction;
    float v_hat = v_i / beta2_correction;
    params[i] -= lr * (m_hat / (sqrtf(v_hat) + eps) + weight_decay * params[i]);
}
