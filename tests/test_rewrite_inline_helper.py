"""Writing a `__device__` helper with a loop out at its call, on CPU: the parameters become locals
holding the arguments, the helper's locals are renamed where they clash with the kernel's, the return
becomes the assignment; the helper's loop is then the kernel's, and a search loop after it (the first
position of the maximum) is split too. The gpu-marked test checks the chain on the H200."""

from __future__ import annotations

from pathlib import Path

import pytest
from cuda_agent.agent.candidates import Candidate
from cuda_agent.agent.device_source import device_source
from cuda_agent.agent.proposers.rewrites import inline_helper, warp_per_output
from cuda_agent.agent.targets import KernelTarget, load_targets
from cuda_agent.sandbox.compile import compile_kernel

from tests.test_rewrite_warp_per_output import ROW_SPEC, _target, body_of, needs_compiler, shown

OUTSIDE = Path(__file__).resolve().parents[1] / "bench" / "kernels" / "outside"


def row_argmax() -> KernelTarget:
    (target,) = load_targets(OUTSIDE / "row_argmax.cu").targets
    return target


def then(target: KernelTarget, candidate: Candidate) -> KernelTarget:
    found = load_targets(target.path, candidate.source).find(target.kernel.name)
    assert found is not None and found.spec is not None
    return found


@needs_compiler
def test_a_helpers_loop_is_written_out_with_its_clashing_local_renamed() -> None:
    target = row_argmax()
    (candidate,) = inline_helper.propose(target)
    body = body_of(candidate, "row_argmax")
    assert "float best;\n    {  // row_max(...), written out" in body
    assert "const float* row = x_row;" in body and "int n = cols;" in body
    assert "float best_ = -INFINITY;" in body and "best = best_;" in body  # the helper's best, renamed
    assert compile_kernel(device_source(candidate.source), "row_argmax").ok


@needs_compiler
def test_then_the_maximum_and_the_search_for_it_are_both_split() -> None:
    target = row_argmax()
    (inlined,) = inline_helper.propose(target)
    split = warp_per_output.propose(then(target, inlined))
    warp = next(c for c in split if c.description.startswith("one warp per r, block 256"))
    body = body_of(warp, "row_argmax")
    assert "for (int i = lane; i < n; i += 32) best_ = fmaxf(best_, row[i]);" in body
    assert "for (int c = lane; c < cols; c += 32) {" in body and "found = true;\n            break;" in body
    assert "if (other_found && (!found || other < index)) {" in body  # the first find of any lane
    assert compile_kernel(device_source(warp.source), "row_argmax").ok


@pytest.mark.parametrize(
    "helper",
    [
        # returns early: the rest of its body would run after the written-out return
        "__device__ float first(const float* r, int n) {"
        " for (int i = 0; i < n; ++i) if (r[i] > 0) return r[i]; return 0.0f; }",
        # takes a reference: the local would be a copy
        "__device__ float first(const float* r, int& n) { float s = 0; for (int i = 0; i < n; ++i) s += r[i];"
        " return s; }",
    ],
)
def test_helpers_whose_body_does_not_end_in_its_one_return_are_left_alone(helper: str) -> None:
    kernel = (
        ROW_SPEC.format(out_shape='["rows"]')
        + helper
        + """
__global__ void k(const float* x, float* y, int rows, int cols)
{
    int r = blockIdx.x * blockDim.x + threadIdx.x;
    if (r >= rows) return;
    int n = cols;
    float v = first(x + (size_t)r * cols, n);
    y[r] = v;
}
"""
    )
    assert inline_helper.propose(_target(kernel, "k")) == []


@pytest.mark.gpu
def test_the_written_out_and_split_argmax_verifies_and_is_faster_on_the_gpu() -> None:
    from cuda_agent.agent.engine import Engine, EngineSettings

    target = row_argmax()
    (inlined,) = inline_helper.propose(target)
    split = warp_per_output.propose(then(target, inlined))
    with Engine(EngineSettings(use_cache=False, input_sets=2)) as engine:
        baseline = engine.baseline(target)
        assert baseline.usable, baseline.error
        results = engine.evaluate(baseline, [inlined, *split[:1], *split[3:4]])
    seen = shown(target, results)
    assert all(r.verified for r in results) and any(r.status == "faster" for r in results[1:]), seen
