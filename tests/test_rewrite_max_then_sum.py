"""The max-then-sum rewrite on CPU: an online softmax's normaliser, in each spelling the analysis takes
for a logsumexp pair (the rescale before the add, llm.c's branch with a copy of the old maximum and a
double sum, a fresh maximum through fmaxf with __expf), becomes a pass for the maximum and a pass for the
sum against it, each then split across lanes and widened by the chained rewrites (all compile). Not
offered where the loop does anything else or the sum does not start at zero. The gpu-marked test verifies
the chains on the H200."""

from __future__ import annotations

import pytest
from cuda_agent.agent import optimize, search
from cuda_agent.agent.device_source import device_source
from cuda_agent.agent.proposers.rewrites import max_then_sum, vector_loop, warp_per_output
from cuda_agent.agent.targets import KernelTarget
from cuda_agent.sandbox.compile import compile_kernel

from tests.test_idioms import _target, needs_compiler
from tests.test_rewrite_promote import chained, outside
from tests.test_rewrite_warp_per_output import BRANCHED_ONLINE, ROW_SPEC, body_of

FRESH_MAXIMUM = (
    ROW_SPEC.format(out_shape='["rows"]')
    + """
__global__ void k(const float* x, float* y, int rows, int cols)
{
    int r = blockIdx.x * blockDim.x + threadIdx.x;
    if (r >= rows) return;
    float m = -1e30f;
    float s = 0.0f;
    for (int c = 0; c < cols; ++c) {
        float mn = fmaxf(m, x[r * cols + c]);
        s = s * __expf(m - mn) + __expf(x[r * cols + c] - mn);
        m = mn;
    }
    y[r] = m + logf(s);
}
"""
)


def split(target: KernelTarget) -> str:
    """The rewrite's body, after checking that it and its chain (lanes, then vectors) compile."""
    (candidate,) = max_then_sum.propose(target)
    assert any("final maximum" in a for a in candidate.assumptions)
    warps = chained(target, candidate, warp_per_output.PROPOSER)
    assert warps, "the two plain passes were not split across lanes"
    vectors = chained(target, warps[0], vector_loop.PROPOSER)
    for c in (candidate, *warps[:2], *vectors):
        result = compile_kernel(device_source(c.source), target.kernel.name, flags=c.flags)
        assert result.ok, [d.message for d in result.diagnostics]
    return body_of(candidate, target.kernel.name)


@needs_compiler
def test_the_rescaled_one_pass_normaliser_becomes_a_maximum_then_a_sum() -> None:
    body = split(outside("softmax_online"))
    first = body.index("maxval = fmaxf(maxval, v);")
    second = body.index("sum += expf(v - maxval);")
    assert first < second and body.count("float v = inp_row[j];") == 2  # each pass reads the element
    assert "sum *=" not in body and "if (v > maxval)" not in body
    assert "out_row[j] = expf(inp_row[j] - maxval) * norm;" in body  # what follows is untouched


@needs_compiler
def test_a_branch_with_a_copy_of_the_old_maximum_and_a_double_sum() -> None:
    body = split(_target(BRANCHED_ONLINE, "k"))
    assert "top = fmaxf(top, v);" in body and "total += expf(v - top);" in body
    assert "before" not in body and "double total = 0.0;" in body


@needs_compiler
def test_a_fresh_maximum_through_fmaxf_keeps_the_users_exponential() -> None:
    body = split(_target(FRESH_MAXIMUM, "k"))
    assert "m = fmaxf(m, x[r * cols + c]);" in body and "s += __expf(x[r * cols + c] - m);" in body
    assert "mn" not in body and "y[r] = m + logf(s);" in body


@pytest.mark.parametrize(
    ("old", "new"),
    [
        ("float s = 0.0f;", "float s = 1.0f;"),  # a sum that does not start at zero
        ("        m = mn;\n", "        m = mn;\n        y[r * cols + c] = mn;\n"),  # a store each step
    ],
)
def test_not_offered_where_the_pair_or_the_loop_would_change(old: str, new: str) -> None:
    assert old in FRESH_MAXIMUM
    assert max_then_sum.propose(_target(FRESH_MAXIMUM.replace(old, new), "k")) == []


def test_the_search_measures_the_two_passes_split_across_lanes_in_the_first_round() -> None:
    first = search.interleave(search._first_round(outside("softmax_online"), optimize.PROPOSERS, []))
    chained = "rewrite:max-then-sum+rewrite:warp-per-output"
    assert chained in {c.proposer for c in first}
    assert f"{chained}+rewrite:vector-loop" in {c.proposer for c in first}


@pytest.mark.gpu
def test_two_passes_split_across_lanes_verify_and_beat_the_originals_on_the_gpu() -> None:
    from cuda_agent.agent.engine import Engine, EngineSettings

    from tests.test_rewrite_warp_per_output import shown

    with Engine(EngineSettings(use_cache=False, input_sets=3)) as engine:
        for target in (outside("softmax_online"), _target(BRANCHED_ONLINE, "k")):
            baseline = engine.baseline(target)
            assert baseline.usable, baseline.error
            (candidate,) = max_then_sum.propose(target)
            warps = chained(target, candidate, warp_per_output.PROPOSER)[:2]
            vectors = [v for w in warps for v in chained(target, w, vector_loop.PROPOSER)]
            results = engine.evaluate(baseline, [candidate, *warps, *vectors])
            seen = shown(baseline.target, results)
            assert results and all(r.verified for r in results), seen
            assert max(r.speedup or 0 for r in results) > 2, seen
