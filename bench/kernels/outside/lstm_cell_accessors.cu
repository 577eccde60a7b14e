// An LSTM-style cell update from a PyTorch C++/CUDA extension, written the way torch's extension
// tutorial writes kernels: packed accessors, a row of blocks per batch row (blockIdx.y), x over the
// state, the gates [batch][3][state] read through three sigmoid/tanh helpers templated on scalar_t.
#include <torch/extension.h>

/* cuda-agent
instantiate = "lstm_cell_forward_kernel<float>"
[sizes]
batch = 8192
state = 2048      # 192 MiB of gates, 64 MiB for each state tensor

[args]
gates    = { role = "input",  dtype = "float32", shape = ["batch", 3, "state"] }
old_cell = { role = "input",  dtype = "float32", shape = ["batch", "state"] }
new_h    = { role = "output", dtype = "float32", shape = ["batch", "state"] }
new_cell = { role = "output", dtype = "float32", shape = ["batch", "state"] }

[launch]
block = [256]
grid = ["ceil_div(state, block.x)", "batch"]

[verify]
sizes = [{ batch = 37, state = 1001 }]
oracle = { new_cell = "cell", new_h = "torch.tanh(cell) * torch.sigmoid(gates[:, 1])" }

[verify.intermediates]
cell = "old_cell + torch.tanh(gates[:, 2]) * torch.sigmoid(gates[:, 0])"
*/

template <typename scalar_t>
__device__ __forceinline__ scalar_t sigmoid(scalar_t z) {
    return 1.0 / (1.0 + exp(-z));
}

template <typename scalar_t>
__global__ void lstm_cell_forward_kernel(
    const torch::PackedTensorAccessor32<scalar_t, 3, torch::RestrictPtrTraits> gates,
    const torch::PackedTensorAccessor32<scalar_t, 2, torch::RestrictPtrTraits> old_cell,
    torch::PackedTensorAccessor32<scalar_t, 2, torch::RestrictPtrTraits> new_h,
    torch::PackedTensorAccessor32<scalar_t, 2, torch::RestrictPtrTraits> new_cell) {
    const int n = blockIdx.y;
    const int c = blockIdx.x * blockDim.x + threadIdx.x;
    if (c < gates.size(2)) {
        const scalar_t input_gate = sigmoid(gates[n][0][c]);
        const scalar_t output_gate = sigmoid(gates[n][1][c]);
        const scalar_t candidate = tanh(gates[n][2][c]);
        new_cell[n][c] = old_cell[n][c] + candidate * input_gate;
        new_h[n][c] = tanh(new_cell[n][c]) * output_gate;
    }
}
