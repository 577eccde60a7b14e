"""Kernels spelled otherwise than the rewrites read them get the rewrites through their normal form: a
grid-stride loop written as a `while` is read as its `for` (the vector loop then applies), a barrier as
the kernel's last statement is left out (the element-wise rewrites then apply), and neither is read so
where the index outlives the loop, a `continue` would skip the step, or the barrier orders something."""

from __future__ import annotations

from pathlib import Path

import pytest
from cuda_agent.agent.candidates import Candidate
from cuda_agent.agent.device_source import device_source
from cuda_agent.agent.proposers.normal_form import normal_form
from cuda_agent.agent.proposers.rewrites import stride_loop, vector_loop
from cuda_agent.agent.search import _propose
from cuda_agent.agent.targets import KernelTarget, load_targets
from cuda_agent.sandbox.compile import compile_kernel

from tests.test_rewrite_warp_per_output import needs_compiler

# A leaky ReLU over doubles, its grid-stride loop written as a `while`.
LEAKY = """/* cuda-agent
[sizes]
n = "1 << 22"
[args]
n = { role = "scalar", dtype = "int32", value = "n" }
x = { role = "input", dtype = "float64", shape = ["n"] }
y = { role = "output", dtype = "float64", shape = ["n"] }
slope = { role = "scalar", dtype = "float64", value = 0.01 }
[launch]
block = [256]
grid = [1024]
[verify]
oracle = { y = "torch.where(x > 0, x, x * slope)" }
*/
__global__ void leaky_relu(int n, const double *x, double *y, double slope) {
  int i = threadIdx.x + blockIdx.x * blockDim.x;
  // one grid's worth of elements a step
  while (i < n) {
    if (x[i] > 0.0) y[i] = x[i];
    else y[i] = slope * x[i];
    i += blockDim.x * gridDim.x;
  }
}
"""

# An element-wise 2-D kernel that kept the barrier of the shared-memory kernel it was copied from.
SCALED = """/* cuda-agent
[sizes]
cols = 2048
rows = 1024
[args]
dst = { role = "output", dtype = "float32", shape = ["rows", "cols"] }
src = { role = "input", dtype = "float32", shape = ["rows", "cols"] }
cols = { role = "scalar", dtype = "int32", value = "cols" }
rows = { role = "scalar", dtype = "int32", value = "rows" }
[launch]
block = [16, 16]
grid = ["ceil_div(cols, 16)", "ceil_div(rows, 16)"]
[verify]
oracle = { dst = "src * 3 + 1" }
*/
__global__ void scaled(float *dst, float *src, int cols, int rows)
{
    const int c = blockIdx.x * 16 + threadIdx.x;
    const int r = blockIdx.y * 16 + threadIdx.y;
    int at = r * cols + c;
    if (c < cols && r < rows)
        dst[at] = 3.0f * src[at] + 1.0f;
    __syncthreads();
}
"""


def _target(source: str) -> KernelTarget:
    (target,) = load_targets(Path("kernel.cu"), source).targets
    assert target.spec is not None, target.note
    return target


def _compiles(target: KernelTarget, candidate: Candidate) -> None:
    result = compile_kernel(device_source(candidate.source), target.kernel.name, flags=candidate.flags)
    assert result.ok and not result.diagnostics, [d.message for d in result.diagnostics]


@needs_compiler
def test_a_while_grid_stride_loop_is_read_as_its_for_and_vectorised() -> None:
    target = _target(LEAKY)
    assert vector_loop.propose(target) == []  # as written, no rewrite reads the loop
    normal = normal_form(target)
    assert normal is not None and normal.spec == target.spec
    body = normal.source.split("void leaky_relu(")[1]
    assert "for (int i = threadIdx.x + blockIdx.x * blockDim.x; i < n; i += blockDim.x * gridDim.x) {" in body
    assert "while" not in body and body.count("blockDim.x * gridDim.x") == 1
    assert "// one grid's worth of elements a step" in body  # comments stay
    (candidate,) = _propose(vector_loop.PROPOSER, vector_loop.propose, target, [])
    assert "16-byte loads" in candidate.description
    # both branches store y: the step defines all of it, so it is not read first
    assert "const uint4*>(&y[" not in candidate.source and "const uint4*>(&x[" in candidate.source
    _compiles(target, candidate)


@needs_compiler
def test_a_trailing_barrier_is_left_out_for_the_element_wise_rewrites() -> None:
    target = _target(SCALED)
    assert stride_loop.propose(target) == []  # the barrier: no element-wise rewrite as written
    normal = normal_form(target)
    assert normal is not None and "__syncthreads" not in normal.source
    (candidate,) = _propose(stride_loop.PROPOSER, stride_loop.propose, target, [])
    assert "__syncthreads" not in candidate.source
    _compiles(target, candidate)


@pytest.mark.parametrize(
    ("old", "new", "why"),
    [
        ("  }\n}", "  }\n  y[0] = i;\n}", "the index read after the loop"),
        (
            "if (x[i] > 0.0) y[i] = x[i];",
            "if (x[i] > 0.0) { y[i] = x[i]; continue; }",
            "a continue skips the step",
        ),
        ("else y[i] = slope * x[i];", "else y[i] = slope * x[i];\n    i++;", "the index moved twice"),
    ],
)
def test_a_while_loop_is_left_as_written_where_its_for_would_differ(old: str, new: str, why: str) -> None:
    assert old in LEAKY
    assert normal_form(_target(LEAKY.replace(old, new))) is None, why


def test_a_barrier_with_work_after_it_stays() -> None:
    source = SCALED.replace("    __syncthreads();\n}", "    __syncthreads();\n    dst[0] = src[1];\n}")
    assert normal_form(_target(source)) is None


@pytest.mark.gpu
def test_rewrites_made_on_the_normal_form_verify_on_the_gpu() -> None:
    """The leaky ReLU's vector loop (its `while` read as a `for`, its output not loaded) and the stride loop
    of the kernel that ended with a barrier, verified against the kernels as written."""
    from cuda_agent.agent.engine import Engine, EngineSettings

    from tests.test_rewrite_warp_per_output import shown

    with Engine(EngineSettings(use_cache=False, input_sets=2)) as engine:
        for target, proposer in ((_target(LEAKY), vector_loop), (_target(SCALED), stride_loop)):
            baseline = engine.baseline(target)
            assert baseline.usable, baseline.error
            results = engine.evaluate(baseline, _propose(proposer.PROPOSER, proposer.propose, target, []))
            seen = shown(baseline.target, results)
            print(seen)
            assert results and all(r.verified for r in results), seen
