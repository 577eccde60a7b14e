"""How long kernel discovery takes on a large `.cu` file: the language server runs it on every edit.

    python bench/parse_bench.py [--lines 5000] [--repeat 20]

Prints the median (and min/max) of: a full parse, discovery of kernels and launch sites on a fresh
parse, an incremental reparse after a one-line edit, and `device_source`. The target is far under
50 ms for the full parse plus discovery of a 5,000-line file.
"""

from __future__ import annotations

import argparse
import statistics
import time
from collections.abc import Callable
from pathlib import Path

from cuda_agent.agent.device_source import device_source
from cuda_agent.agent.kernels import find_kernels, find_launch_sites
from cuda_agent.agent.parsing import cuda_language, parse_cuda
from cuda_agent.agent.targets import load_targets
from tree_sitter import Parser, Point, Tree

# One module of a realistic CUDA file: a macro, helpers, a templated reduction, an element-wise kernel
# with restrict pointers, an extern "C" kernel and a host launcher; about 60 lines.
MODULE = """\
// ---------------------------------------------------------------------------------------------
// Module {i}: fused scale-and-reduce. Layout: [rows, cols] row-major; one block per row.
// ---------------------------------------------------------------------------------------------
#define TILE_{i} 32
#define ROWS_{i} 8

__device__ __forceinline__ float warp_reduce_{i}(float v) {{
  #pragma unroll
  for (int offset = 16; offset > 0; offset >>= 1) v += __shfl_down_sync(0xffffffffu, v, offset);
  return v;
}}

__host__ __device__ inline float scale_{i}(float v, float s) {{ return v * s + {i}.0f; }}

template <typename T, int BLOCK = 256>
__global__ void __launch_bounds__(BLOCK) row_sum_{i}(const T* __restrict__ x, T* __restrict__ out,
                                                     int rows, int cols) {{
  __shared__ float partial[BLOCK / 32];
  const int row = blockIdx.x;
  float acc = 0.0f;
  for (int c = threadIdx.x; c < cols; c += BLOCK) acc += static_cast<float>(x[row * cols + c]);
  acc = warp_reduce_{i}(acc);
  if (threadIdx.x % 32 == 0) partial[threadIdx.x / 32] = acc;
  __syncthreads();
  if (threadIdx.x < BLOCK / 32) acc = warp_reduce_{i}(partial[threadIdx.x]);
  if (threadIdx.x == 0) out[row] = static_cast<T>(acc);
}}

__global__ void axpby_{i}(int n, float a, const float* __restrict__ x, float b, float *y) {{
  int i = blockIdx.x * blockDim.x + threadIdx.x;  /* grid-stride below */
  for (; i < n; i += gridDim.x * blockDim.x) y[i] = scale_{i}(a * x[i] + b * y[i], 1.0f);
}}

extern "C" __global__ void transpose_{i}(const float* in, float* out, int n) {{
  __shared__ float tile[TILE_{i}][TILE_{i} + 1];
  int x = blockIdx.x * TILE_{i} + threadIdx.x, y = blockIdx.y * TILE_{i} + threadIdx.y;
  for (int j = 0; j < TILE_{i}; j += ROWS_{i})
    if (x < n && y + j < n) tile[threadIdx.y + j][threadIdx.x] = in[(y + j) * n + x];
  __syncthreads();
  x = blockIdx.y * TILE_{i} + threadIdx.x;
  y = blockIdx.x * TILE_{i} + threadIdx.y;
  for (int j = 0; j < TILE_{i}; j += ROWS_{i})
    if (x < n && y + j < n) out[(y + j) * n + x] = tile[threadIdx.x][threadIdx.y + j];
}}

void launch_module_{i}(const float* x, float* y, float* out, int rows, int cols, cudaStream_t s) {{
  dim3 grid(rows);
  dim3 block(256);
  row_sum_{i}<float, 256><<<grid, block, 0, s>>>(x, out, rows, cols);
  axpby_{i}<<<(rows * cols + 255) / 256, 256, 0, s>>>(rows * cols, 2.0f, x, 0.5f, y);
  dim3 tiles((cols + TILE_{i} - 1) / TILE_{i}, (rows + TILE_{i} - 1) / TILE_{i});
  transpose_{i}<<<tiles,
                  dim3(TILE_{i}, ROWS_{i}),
                  0,
                  s>>>(x, y, cols);
  if (cudaGetLastError() != cudaSuccess) std::abort();
}}

"""

MAIN = """\
int main() {
  float *x = nullptr, *y = nullptr, *out = nullptr;
  cudaMalloc(&x, 1 << 24);
  cudaMalloc(&y, 1 << 24);
  cudaMalloc(&out, 1 << 16);
  launch_module_0(x, y, out, 1024, 1024, 0);
  cudaDeviceSynchronize();
  return 0;
}
"""


def generate_source(target_lines: int) -> str:
    header = "#include <cstdlib>\n#include <cuda_fp16.h>\n\n"
    modules: list[str] = []
    lines = header.count("\n") + MAIN.count("\n")
    while lines < target_lines:
        module = MODULE.format(i=len(modules))
        modules.append(module)
        lines += module.count("\n")
    return header + "".join(modules) + MAIN


def median_ms(action: Callable[[], object], repeat: int) -> tuple[float, float, float]:
    action()  # warm-up: caches the language and queries
    times = []
    for _ in range(repeat):
        start = time.perf_counter()
        action()
        times.append((time.perf_counter() - start) * 1000)
    return statistics.median(times), min(times), max(times)


def one_line_edit(source: str) -> tuple[str, Tree]:
    """A change in the middle of the file (a constant in a kernel body), applied to a parsed tree the
    way the language server does it, with `tree.edit`. Returns the new source and the edited old tree,
    which `parse_cuda(new_source, old_tree)` reparses incrementally."""
    old = "y[i] = scale_40(a * x[i] + b * y[i], 1.0f);"
    new = "y[i] = scale_40(a * x[i] + b * y[i], 0.25f);"
    data = source.encode()
    start = data.index(old.encode())
    old_end, new_end = start + len(old.encode()), start + len(new.encode())
    row = data.count(b"\n", 0, start)
    column = start - (data.rfind(b"\n", 0, start) + 1)
    edited = parse_cuda(data)
    edited.edit(
        start_byte=start,
        old_end_byte=old_end,
        new_end_byte=new_end,
        start_point=Point(row, column),
        old_end_point=Point(row, column + old_end - start),
        new_end_point=Point(row, column + new_end - start),
    )
    return source.replace(old, new), edited


def discover(source: str, tree: Tree | None = None) -> tuple[int, int]:
    tree = tree or parse_cuda(source)
    return len(find_kernels(source, tree)), len(find_launch_sites(source, tree))


def main() -> None:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--lines", type=int, default=5000)
    parser.add_argument("--repeat", type=int, default=20)
    options = parser.parse_args()

    source = generate_source(options.lines)
    kernels, launches = discover(source)
    print(
        f"file: {source.count(chr(10))} lines, {len(source.encode()) / 1024:.0f} KiB, "
        f"{kernels} kernels, {launches} launch sites"
    )

    tree = parse_cuda(source)
    new_source, edited_tree = one_line_edit(source)
    # The incremental tree must describe the file exactly as a fresh parse does.
    assert find_kernels(new_source, parse_cuda(new_source, edited_tree)) == find_kernels(new_source)

    # parse_cuda reuses recent parses of the same or a similar text: the full figures use a parser of
    # their own, and the candidate figures a text not seen before on each run (one kernel's constant
    # changed), as a search's candidates are.
    fresh = Parser(cuda_language())
    candidates = iter(source.replace("1.0f);", f"{n}.5f);", 1) for n in range(2 * options.repeat + 4))

    figures = {
        "parse (full)": lambda: fresh.parse(source.encode()),
        "parse + find_kernels + find_launch_sites": lambda: discover(source, fresh.parse(source.encode())),
        "parse of a candidate (a recent parse reused)": lambda: parse_cuda(next(candidates)),
        "find_kernels + find_launch_sites (tree given)": lambda: discover(source, tree),
        # Each run reparses a fresh copy: a reparse must start from the edited, not yet reparsed tree.
        "incremental reparse after a 1-line edit": lambda: parse_cuda(new_source, edited_tree.copy()),
        "incremental reparse + discovery": lambda: discover(
            new_source, parse_cuda(new_source, edited_tree.copy())
        ),
        "device_source of a candidate (parse + blank host code)": lambda: device_source(next(candidates)),
        # What the language server runs on each edit: discovery, written specs, inferred specs (cached per
        # kernel text, so after the first run only edited kernels are inferred again).
        "load_targets (the server's analysis of an edit)": lambda: load_targets(Path("big.cu"), new_source),
    }
    width = max(len(name) for name in figures)
    print(f"median of {options.repeat} runs (min .. max), ms:")
    for name, action in figures.items():
        median, low, high = median_ms(action, options.repeat)
        print(f"  {name:<{width}}  {median:7.2f}  ({low:.2f} .. {high:.2f})")


if __name__ == "__main__":
    main()
