// needs: torch
// torch_ext.cu: a PyTorch C++/CUDA extension with two ops, built with torch.utils.cpp_extension.load:
//   fused_bias_leaky_relu(x, bias, negative_slope): y = leaky_relu(x + bias), bias per channel (last dim),
//     any floating dtype through AT_DISPATCH_FLOATING_TYPES;
//   row_l2_normalize(x): each row of a 2-D float tensor divided by its L2 norm (F.normalize(x, dim=1)).
// Python side (not in this file): y = ext.fused_bias_leaky_relu(x, b, 0.2); z = ext.row_l2_normalize(e)
#include <torch/extension.h>
#include <cuda.h>
#include <cuda_runtime.h>
#include <ATen/cuda/CUDAContext.h>

#define CHECK_CUDA(x) TORCH_CHECK(x.device().is_cuda(), #x " must be a CUDA tensor")
#define CHECK_CONTIGUOUS(x) TORCH_CHECK(x.is_contiguous(), #x " must be contiguous")
#define CHECK_INPUT(x) \
    CHECK_CUDA(x);     \
    CHECK_CONTIGUOUS(x)

template <typename scalar_t>
__global__ void fused_bias_leaky_relu_kernel(const scalar_t* __restrict__ x, const scalar_t* __restrict__ bias,
                                             scalar_t* __restrict__ y, const float negative_slope,
                                             const int64_t numel, const int64_t channels) {
    const int64_t i = (int64_t)blockIdx.x * blockDim.x + threadIdx.x;
    if (i < numel) {
        scalar_t v = x[i] + bias[i % channels];
        y[i] = v > scalar_t(0) ? v : v * static_cast<scalar_t>(negative_slope);
    }
}

__global__ void row_l2_normalize_kernel(const float* __restrict__ x, float* __restrict__ y, int rows, int cols,
                                        float eps) {
    extern __shared__ float partial[];
    const int row = blockIdx.x;
    const float* xr = x + (int64_t)row * cols;
    float s = 0.f;
    for (int c = threadIdx.x; c < cols; c += blockDim.x) s += xr[c] * xr[c];
    partial[threadIdx.x] = s;
    __syncthreads();
    for (int stride = blockDim.x / 2; stride > 0; stride >>= 1) {
        if (threadIdx.x < stride) partial[threadIdx.x] += partial[threadIdx.x + stride];
        __syncthreads();
    }
    const float inv = 1.0f / fmaxf(sqrtf(partial[0]), eps);
    for (int c = threadIdx.x; c < cols; c += blockDim.x) y[(int64_t)row * cols + c] = xr[c] * inv;
}

torch::Tensor fused_bias_leaky_relu(torch::Tensor x, torch::Tensor bias, double negative_slope) {
    CHECK_INPUT(x);
    CHECK_INPUT(bias);
    TORCH_CHECK(bias.dim() == 1 && bias.size(0) == x.size(-1), "bias must match the last dim of x");
    auto y = torch::empty_like(x);
    const int64_t numel = x.numel();
    const int threads = 1024;
    const int blocks = (numel + threads - 1) / threads;
    auto stream = at::cuda::getCurrentCUDAStream();
    AT_DISPATCH_FLOATING_TYPES(x.scalar_type(), "fused_bias_leaky_relu", ([&] {
        fused_bias_leaky_relu_kernel<scalar_t><<<blocks, threads, 0, stream>>>(
            x.data_ptr<scalar_t>(), bias.data_ptr<scalar_t>(), y.data_ptr<scalar_t>(),
            static_cast<float>(negative_slope), numel, x.size(-1));
    }));
    C10_CUDA_KERNEL_LAUNCH_CHECK();
    return y;
}

torch::Tensor row_l2_normalize(torch::Tensor x) {
    CHECK_INPUT(x);
    TORCH_CHECK(x.dim() == 2 && x.scalar_type() == torch::kFloat32, "x must be a 2-D float32 tensor");
    auto y = torch::empty_like(x);
    const int rows = x.size(0), cols = x.size(1);
    const int threads = 256;  // power of two for the tree reduction
    row_l2_normalize_kernel<<<rows, threads, threads * sizeof(float), at::cuda::getCurrentCUDAStream()>>>(
        x.data_ptr<float>(), y.data_ptr<float>(), rows, cols, 1e-12f);
    C10_CUDA_KERNEL_LAUNCH_CHECK();
    return y;
}

PYBIND11_MODULE(TORCH_EXTENSION_NAME, m) {
    m.def("fused_bias_leaky_relu", &fused_bias_leaky_relu, "y = leaky_relu(x + bias) (CUDA)");
    m.def("row_l2_normalize", &row_l2_normalize, "x / ||x||_2 per row (CUDA)");
}
