"""A kernel defined in a header and launched from a .cu next to it (or a runner file in the folder above)
gets its spec from that launch, with the header's type aliases and #defines; a rewrite of it says that the
launches over there were not changed."""

from __future__ import annotations

from dataclasses import replace
from pathlib import Path

import pytest
from cuda_agent.agent.rewrite import write_launch
from cuda_agent.agent.targets import load_targets

HEADER = """#pragma once
#include <cuda_fp16.h>
using scalar = __half;
#define VEC 1

__global__ void scale_kernel(scalar* __restrict__ y, const scalar* __restrict__ x, int n) {
    int i = blockIdx.x * blockDim.x + threadIdx.x;
    if (i < n) y[i] = __hmul(x[i], __float2half(2.0f));
}
"""

RUNNER = """#include <vector>
#include "kernels/scale.cuh"

struct Problem { int batch; int width; };

void run_scale(scalar* y, const scalar* x, const Problem& p, cudaStream_t stream) {
    const int n = p.batch * p.width;
    const int threads = 128;
    scale_kernel<<<(n + threads - 1) / threads, threads, 0, stream>>>(y, x, n);
}

int main() {
    const Problem p{64, 8192};
    std::vector<scalar> host(p.batch * p.width);
    scalar *x, *y;
    cudaMalloc(&x, host.size() * sizeof(scalar));
    cudaMalloc(&y, host.size() * sizeof(scalar));
    run_scale(y, x, p, 0);
    return 0;
}
"""


def test_a_header_kernel_takes_its_spec_from_the_runner_next_to_its_folder(tmp_path: Path) -> None:
    (tmp_path / "kernels").mkdir()
    header = tmp_path / "kernels" / "scale.cuh"
    header.write_text(HEADER)
    (tmp_path / "runner.cu").write_text(RUNNER)
    target = load_targets(header).find("scale_kernel")
    assert target is not None and target.spec is not None, target.note if target else ""
    spec = target.spec
    assert spec.sizes == {"n": 64 * 8192}
    assert spec.launch.block == (128,)
    assert {a.name: a.dtype for a in spec.arguments if a.is_buffer} == {"y": "float16", "x": "float16"}
    assert "of runner.cu" in target.note and "run_scale()" in target.note
    written = write_launch(target, replace(spec.launch, block=(256,)))
    assert any("runner.cu also launch it, unchanged" in note for note in written.notes), written.notes


def test_a_header_no_file_launches_keeps_the_signature_inference(tmp_path: Path) -> None:
    header = tmp_path / "scale.cuh"
    header.write_text(HEADER)
    (tmp_path / "other.cu").write_text('#include "scale.cuh"\nint main() { return 0; }\n')
    target = load_targets(header).find("scale_kernel")
    assert target is not None and target.spec is not None
    assert target.spec.sizes == {"n": 16777216}  # the signature's default size
    assert "pattern" in target.note


def test_a_file_opened_by_a_relative_path_is_not_its_own_neighbour(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    (tmp_path / "runner.cu").write_text(
        HEADER.replace("#pragma once\n", "") + RUNNER.replace('#include "kernels/scale.cuh"\n', "")
    )
    monkeypatch.chdir(tmp_path)
    target = load_targets(Path("runner.cu")).find("scale_kernel")
    assert target is not None and target.spec is not None
    written = write_launch(target, replace(target.spec.launch, block=(256,)))
    assert not any("also launch it" in note for note in written.notes), written.notes
    assert "const int threads = 256;" in written.text


HALVING_HEADER = """__global__ void halve(int* src, int* dst, int count) {
  extern __shared__ int part[];
  int t = threadIdx.x;
  int g = blockIdx.x * blockDim.x + threadIdx.x;
  part[t] = (g < count) ? src[g] : 0;
  __syncthreads();
  if (t == 0) dst[blockIdx.x] = part[0];
}
"""

HALVING_MAIN = """#include "./halve.cuh"
#define THREADS 256
const int COUNT = 1 << 20;
int *a, *b, *c;
void run_halve(bool warm = false) {
  int blocks = (COUNT + THREADS - 1) / THREADS;
  halve<<<blocks, THREADS, sizeof(int) * THREADS>>>(a, b, COUNT);
  int left = blocks;
  while (left > 1) {
    int next = (left + THREADS - 1) / THREADS;
    halve<<<next, THREADS, sizeof(int) * THREADS>>>(b, c, left);
    left = next;
  }
}
int main() {
  cudaMalloc(&a, COUNT * sizeof(int));
  cudaMalloc(&b, COUNT * sizeof(int));
  cudaMalloc(&c, COUNT * sizeof(int));
  for (int i = 0; i < 4; i++) run_halve(true);
  run_halve();
  return 0;
}
"""


def test_a_header_kernel_whose_launcher_is_called_from_a_loop_and_after_it_is_read_in_bounded_time(
    tmp_path: Path,
) -> None:
    # Reading the chain of callers for the note went round a cycle of scopes without end (the text grew
    # to 22 GB): in a process of its own, so that a hang fails the test instead of the whole run.
    import subprocess
    import sys

    (tmp_path / "halve.cuh").write_text(HALVING_HEADER)
    (tmp_path / "main.cu").write_text(HALVING_MAIN)
    script = (
        "from pathlib import Path; from cuda_agent.agent.targets import load_targets; "
        f"(t,) = load_targets(Path({str(tmp_path / 'halve.cuh')!r})).targets; print(t.spec is not None)"
    )
    done = subprocess.run([sys.executable, "-c", script], capture_output=True, text=True, timeout=120)
    assert done.returncode == 0 and done.stdout.strip() == "True", done.stderr[-2000:]
