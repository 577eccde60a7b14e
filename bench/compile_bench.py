"""Median NVRTC compile time (source to cubin, ptxas included) of a few realistic kernels.

    python bench/compile_bench.py [--repeats 7] [--arch sm_90] [--backend nvrtc]

Target on the GPU box: the median over these kernels at most 0.15 s. Each kernel is compiled
once first (NVRTC loads its builtins on the first compile of a process), then `--repeats` times
with a fresh comment so nothing can be reused between runs.
"""

from __future__ import annotations

import argparse
import statistics
import sys
from collections.abc import Callable

from cuda_agent.sandbox.compile import compile_kernel

GELU_FP16 = r"""
#include <cuda_fp16.h>
__global__ void gelu_half2(const __half2* __restrict__ x, __half2* __restrict__ y, int n2) {
    int i = blockIdx.x * blockDim.x + threadIdx.x;
    if (i >= n2) return;
    float2 v = __half22float2(x[i]);
    v.x = 0.5f * v.x * (1.0f + tanhf(0.7978845608f * (v.x + 0.044715f * v.x * v.x * v.x)));
    v.y = 0.5f * v.y * (1.0f + tanhf(0.7978845608f * (v.y + 0.044715f * v.y * v.y * v.y)));
    y[i] = __float22half2_rn(v);
}
"""

SGEMM_TILED = r"""
template <int TILE>
__global__ void sgemm_tiled(const float* __restrict__ a, const float* __restrict__ b, float* __restrict__ c,
                            int m, int n, int k) {
    __shared__ float as[TILE][TILE];
    __shared__ float bs[TILE][TILE + 1];
    int row = blockIdx.y * TILE + threadIdx.y, col = blockIdx.x * TILE + threadIdx.x;
    float acc = 0.0f;
    for (int t = 0; t < k; t += TILE) {
        int ak = t + threadIdx.x, bk = t + threadIdx.y;
        as[threadIdx.y][threadIdx.x] = (row < m && ak < k) ? a[row * k + ak] : 0.0f;
        bs[threadIdx.y][threadIdx.x] = (col < n && bk < k) ? b[bk * n + col] : 0.0f;
        __syncthreads();
#pragma unroll
        for (int i = 0; i < TILE; ++i) acc += as[threadIdx.y][i] * bs[i][threadIdx.x];
        __syncthreads();
    }
    if (row < m && col < n) c[row * n + col] = acc;
}
"""

SOFTMAX_ROWS = r"""
__device__ __forceinline__ float warp_max(float v) {
    for (int o = 16; o > 0; o >>= 1) v = fmaxf(v, __shfl_xor_sync(0xffffffffu, v, o));
    return v;
}
__device__ __forceinline__ float warp_sum(float v) {
    for (int o = 16; o > 0; o >>= 1) v += __shfl_xor_sync(0xffffffffu, v, o);
    return v;
}
template <int BLOCK>
__global__ void softmax_rows(const float* __restrict__ x, float* __restrict__ y, int cols) {
    __shared__ float partial[BLOCK / 32];
    const float* row = x + blockIdx.x * (size_t)cols;
    float m = -3.402823466e38f;
    for (int j = threadIdx.x; j < cols; j += BLOCK) m = fmaxf(m, row[j]);
    m = warp_max(m);
    if (threadIdx.x % 32 == 0) partial[threadIdx.x / 32] = m;
    __syncthreads();
    m = warp_max(threadIdx.x < BLOCK / 32 ? partial[threadIdx.x] : -3.402823466e38f);
    __syncthreads();
    float s = 0.0f;
    for (int j = threadIdx.x; j < cols; j += BLOCK) s += __expf(row[j] - m);
    s = warp_sum(s);
    if (threadIdx.x % 32 == 0) partial[threadIdx.x / 32] = s;
    __syncthreads();
    s = warp_sum(threadIdx.x < BLOCK / 32 ? partial[threadIdx.x] : 0.0f);
    for (int j = threadIdx.x; j < cols; j += BLOCK) y[blockIdx.x * (size_t)cols + j] = __expf(row[j] - m) / s;
}
"""

LAYERNORM_BF16 = r"""
#include <cuda_bf16.h>
__global__ void layernorm_bf16(const __nv_bfloat16* __restrict__ x, const __nv_bfloat16* __restrict__ gamma,
                               const __nv_bfloat16* __restrict__ beta, __nv_bfloat16* __restrict__ y,
                               int cols, float eps) {
    __shared__ float mean_s, rstd_s;
    const __nv_bfloat16* row = x + blockIdx.x * (size_t)cols;
    float sum = 0.0f, sq = 0.0f;
    for (int j = threadIdx.x; j < cols; j += blockDim.x) {
        float v = __bfloat162float(row[j]);
        sum += v;
        sq += v * v;
    }
    for (int o = 16; o > 0; o >>= 1) {
        sum += __shfl_xor_sync(0xffffffffu, sum, o);
        sq += __shfl_xor_sync(0xffffffffu, sq, o);
    }
    if (threadIdx.x == 0) {
        mean_s = sum / cols;
        rstd_s = rsqrtf(sq / cols - mean_s * mean_s + eps);
    }
    __syncthreads();
    for (int j = threadIdx.x; j < cols; j += blockDim.x) {
        float v = (__bfloat162float(row[j]) - mean_s) * rstd_s;
        y[blockIdx.x * (size_t)cols + j] =
            __float2bfloat16(v * __bfloat162float(gamma[j]) + __bfloat162float(beta[j]));
    }
}
"""

# cooperative_groups.h is realistic too, but its front-end cost (~1 s on CUDA 13.0) dominates.
REDUCE_COOPERATIVE_GROUPS = r"""
#include <cooperative_groups.h>
#include <cooperative_groups/reduce.h>
namespace cg = cooperative_groups;
__global__ void reduce_sum_cg(const float* __restrict__ x, float* __restrict__ out, int n) {
    cg::thread_block block = cg::this_thread_block();
    cg::thread_block_tile<32> warp = cg::tiled_partition<32>(block);
    float v = 0.0f;
    for (int i = blockIdx.x * blockDim.x + threadIdx.x; i < n; i += gridDim.x * blockDim.x) v += x[i];
    v = cg::reduce(warp, v, cg::plus<float>());
    if (warp.thread_rank() == 0) atomicAdd(out, v);
}
"""

KERNELS: dict[str, tuple[str, str]] = {
    "gelu fp16 (cuda_fp16.h)": (GELU_FP16, "gelu_half2"),
    "tiled sgemm<32>": (SGEMM_TILED, "sgemm_tiled<32>"),
    "softmax rows<256>": (SOFTMAX_ROWS, "softmax_rows<256>"),
    "layernorm bf16 (cuda_bf16.h)": (LAYERNORM_BF16, "layernorm_bf16"),
    "reduce (cooperative_groups.h)": (REDUCE_COOPERATIVE_GROUPS, "reduce_sum_cg"),
}


def time_compiles(
    source: str, kernel: str, repeats: int, compile_once: Callable[[str, str], float]
) -> list[float]:
    compile_once(source, kernel)  # warm-up, not counted
    return [compile_once(f"// run {run}\n{source}", kernel) for run in range(repeats)]


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--repeats", type=int, default=7)
    parser.add_argument("--arch", default="sm_90")
    parser.add_argument("--backend", choices=["nvrtc", "nvcc"], default="nvrtc")
    args = parser.parse_args(argv)

    def compile_once(source: str, kernel: str) -> float:
        result = compile_kernel(source, kernel, arch=args.arch, backend=args.backend)
        if not result.ok:
            raise SystemExit(f"{kernel}: " + "; ".join(d.message for d in result.errors))
        return result.seconds

    medians = []
    print(f"{args.backend} compile, {args.arch}, median of {args.repeats} after one warm-up")
    for label, (source, kernel) in KERNELS.items():
        seconds = time_compiles(source, kernel, args.repeats, compile_once)
        medians.append(statistics.median(seconds))
        print(f"  {label:32s} median {medians[-1]:.3f} s  (min {min(seconds):.3f}, max {max(seconds):.3f})")
    print(f"median over kernels: {statistics.median(medians):.3f} s")
    return 0


if __name__ == "__main__":
    sys.exit(main())
