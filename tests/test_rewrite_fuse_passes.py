"""Two passes over the same values made one (rewrite:fuse-passes), on CPU: a maximum followed by a sum of
exponentials of the values less it (the online softmax's normaliser), or by the search for its first
position (an argmax), fused whatever the spelling; not fused where the second pass reads other values,
another range, or something computed between the loops. The gpu-marked test checks the results and the
gain of the fused passes split across lanes on the H200."""

from __future__ import annotations

from dataclasses import replace

import pytest
from cuda_agent.agent.device_source import device_source
from cuda_agent.agent.proposers.rewrites import fuse_passes, inline_helper, warp_per_output
from cuda_agent.agent.targets import KernelTarget, load_targets
from cuda_agent.sandbox.compile import compile_kernel

from tests.test_rewrite_promote import outside
from tests.test_rewrite_warp_per_output import _target, body_of, needs_compiler, shown

SPEC = """/* cuda-agent
[sizes]
rows = 4096
cols = 8192
[args]
x = { role = "input", dtype = "float32", shape = ["rows", "cols"] }
out = { role = "output", dtype = "float32", shape = ["rows"] }
rows = { role = "scalar", dtype = "int32", value = "rows" }
cols = { role = "scalar", dtype = "int32", value = "cols" }
[launch]
block = [128]
grid = ["ceil_div(rows, block.x)"]
[verify]
sizes = [{ rows = 37, cols = 1001 }]
oracle = { out = "torch.logsumexp(x, dim=1)" }
*/
"""

# A log-sum-exp of a row written as a course would: the maximum with a conditional, then the sum.
LOGSUMEXP = (
    SPEC
    + """__global__ void row_lse(const float* x, float* out, int rows, int cols) {
    int row = blockIdx.x * blockDim.x + threadIdx.x;
    if (row < rows) {
        const float* r = x + row * cols;
        float hi = -INFINITY;
        for (int j = 0; j < cols; ++j)
            hi = r[j] > hi ? r[j] : hi;
        float total = 0.f;
        for (int k = 0; k < cols; ++k) {
            total += __expf(r[k] - hi);
        }
        out[row] = hi + logf(total);
    }
}"""
)

ARGMIN_SPEC = SPEC.replace('"float32", shape = ["rows"]', '"int32", shape = ["rows"]').replace(
    "torch.logsumexp(x, dim=1)", "x.argmin(dim=1).int()"
)
# The nearest centroid's index, found as "the smallest distance, then where it is", the row read
# through a flat index rather than a row pointer, the copy of the minimum taken under another name.
ARGMIN = (
    ARGMIN_SPEC
    + """__global__ void nearest(const float* x, int* out, int rows, int cols) {
    int row = blockIdx.x * blockDim.x + threadIdx.x;
    if (row >= rows) return;
    float lowest = INFINITY;
    for (int c = 0; c < cols; c++) {
        if (x[row * cols + c] < lowest) lowest = x[row * cols + c];
    }
    const float target = lowest;
    int where = -1;
    for (int c = 0; c < cols; c++) {
        if (target == x[(size_t)row * cols + c]) {
            where = c;
            break;
        }
    }
    out[row] = where;
}"""
)


def fused(target: KernelTarget) -> str:
    (candidate,) = fuse_passes.propose(target)
    result = compile_kernel(device_source(candidate.source), target.kernel.name)
    assert result.ok, [d.message for d in result.diagnostics]
    again = load_targets(target.path, candidate.source).find(target.kernel.name)
    assert again is not None and again.spec is not None
    return body_of(candidate, target.kernel.name)


def reloaded(target: KernelTarget, source: str) -> KernelTarget:
    again = load_targets(target.path, source, infer=False).find(target.kernel.name)
    assert again is not None
    return replace(again, spec=target.spec)


@needs_compiler
def test_the_maximum_and_the_sum_of_exponentials_become_one_online_pass() -> None:
    body = fused(outside("cross_entropy"))
    assert body.count("for (") == 1  # the logits are read once
    assert "sum *= expf(maxval - v);" in body and "sum += expf(v - maxval);" in body
    assert "logf(sum) + maxval - logits_bt[target]" in body  # what follows runs as written


@needs_compiler
def test_a_conditional_maximum_and_a_braced_sum_with_the_fast_exponential() -> None:
    body = fused(_target(LOGSUMEXP, "row_lse"))
    assert body.count("for (") == 1
    assert "total *= __expf(hi - v);" in body and "total += __expf(v - hi);" in body
    assert body.index("float total = 0.f;") < body.index("for (")  # its start moved above the pass


@needs_compiler
def test_a_helpers_maximum_then_its_first_position_is_an_argmax() -> None:
    target = outside("row_argmax")
    assert fuse_passes.propose(target) == []  # the maximum is behind the helper's call
    (inlined,) = inline_helper.propose(target)
    written_out = reloaded(target, inlined.source)
    body = fused(written_out)
    assert body.count("for (") == 1 and "break" not in body
    assert "if (v > best_) {" in body and "index = i;" in body
    assert body.index("long long index = 0;") < body.index("for (")
    # the fused pass is an argmax the lane split then takes: one read of the row, split over a block
    (candidate,) = fuse_passes.propose(written_out)
    split = warp_per_output.propose(reloaded(target, candidate.source))
    assert split and "one block per r" in split[0].description  # 32000 columns: a block a row first


@needs_compiler
def test_the_smallest_found_again_through_a_copy_is_an_argmin_keeping_the_first() -> None:
    body = fused(_target(ARGMIN, "nearest"))
    assert body.count("for (") == 1
    assert "if (v < lowest) {" in body and "where = c;" in body


# The maximum started at the row's first value and looked for from the second: the other common spelling.
FROM_FIRST = LOGSUMEXP.replace(
    """        float hi = -INFINITY;
        for (int j = 0; j < cols; ++j)""",
    """        float hi = r[0];
        for (int j = 1; j < cols; ++j)""",
)


@needs_compiler
def test_a_maximum_started_at_the_first_value_counts_that_value_first() -> None:
    body = fused(_target(FROM_FIRST, "row_lse"))
    assert body.count("for (") == 1 and "for (int j = 1; j < cols; ++j) {" in body
    assert body.index("total += 1.0f;") < body.index("for (")  # exp(r[0] - hi) with hi = r[0]
    argmin = ARGMIN.replace(
        "float lowest = INFINITY;\n    for (int c = 0;", "float lowest = x[row * cols];\n    for (int c = 1;"
    )
    assert argmin != ARGMIN
    body = fused(_target(argmin, "nearest"))
    assert "where = 0;" in body and body.index("where = 0;") < body.index("for (int c = 1;")
    # a start that is not the first value is not the first value's maximum
    for start in ("r[1]", "0.0f"):
        other = FROM_FIRST.replace("float hi = r[0];", f"float hi = {start};")
        assert fuse_passes.propose(_target(other, "row_lse")) == []


# A helper a pass, as "naive" kernels split them: written out, each pass is in a block of its own.
TWO_HELPERS = (
    SPEC
    + """__device__ float largest(const float* v, int row, int width) {
    float top = -INFINITY;
    for (int i = 0; i < width; i++) top = fmaxf(top, v[row * width + i]);
    return top;
}

__device__ float exp_total(const float* v, int row, int width, float top) {
    float total = 0.f;
    for (int i = 0; i < width; i++) total += expf(v[row * width + i] - top);
    return total;
}

__global__ void row_lse(const float* x, float* out, int rows, int cols) {
    int row = blockIdx.x * blockDim.x + threadIdx.x;
    if (row >= rows) return;
    float hi = largest(x, row, cols);
    float sum = exp_total(x, row, cols, hi);
    out[row] = hi + logf(sum);
}"""
)


# The maximum kept by an `if`, started at the row's first element of a flat row offset, the sum braced.
IF_SPELLED = (
    SPEC
    + """__global__ void row_lse(const float* x, float* out, int rows, int cols) {
    int r = blockIdx.x * blockDim.x + threadIdx.x;
    if (r < rows) {
        int base = r * cols;
        float peak = x[base];
        for (int c = 1; c < cols; ++c) {
            if (x[base + c] > peak) {
                peak = x[base + c];
            }
        }
        float z = 0.0f;
        for (int c = 0; c < cols; ++c) {
            z += expf(x[base + c] - peak);
        }
        out[r] = peak + logf(z);
    }
}"""
)


@needs_compiler
def test_a_maximum_kept_by_an_if_from_the_first_element_of_a_flat_row() -> None:
    body = fused(_target(IF_SPELLED, "row_lse"))
    assert body.count("for (") == 1 and "float v = x[base + c];" in body
    assert "z *= expf(peak - v);" in body and body.index("z += 1.0f;") < body.index("for (")


@needs_compiler
def test_a_helper_a_pass_written_out_is_fused_across_the_two_blocks() -> None:
    target = _target(TWO_HELPERS, "row_lse")
    (inlined,) = inline_helper.propose(target)
    written_out = reloaded(target, inlined.source)
    body = fused(written_out)
    assert body.count("for (") == 1 and "total += expf(v__ - top);" in body
    assert body.index("float total = 0.f;") < body.index("for (")  # above both blocks now
    assert "sum = total;" in body  # the second block keeps what it does after its loop
    (one_pass,) = fuse_passes.propose(written_out)
    split = warp_per_output.propose(reloaded(target, one_pass.source))
    assert split and compile_kernel(device_source(split[0].source), "row_lse").ok


@pytest.mark.parametrize(
    "change",
    [
        ("total += __expf(r[k] - hi);", "total += __expf(r[k + 1] - hi);"),  # another value
        ("for (int k = 0; k < cols; ++k)", "for (int k = 1; k < cols; ++k)"),  # another range
        ("total += __expf(r[k] - hi);", "total += __expf(hi - r[k]);"),  # not the shifted value
        ("total += __expf(r[k] - hi);", "total += r[k] - hi;"),  # not an exponential
        ("float total = 0.f;", "float total = hi;"),  # a start that reads the maximum
        ("float total = 0.f;", "float total = 0.f;\n        out[row] = hi;"),  # a store between
        ("hi = r[j] > hi ? r[j] : hi;", "hi = r[j] > hi ? r[j] : hi;\n        out[row] = hi;"),
    ],
)
def test_not_fused_where_the_second_pass_reads_something_else(change: tuple[str, str]) -> None:
    source = LOGSUMEXP.replace(*change)
    assert source != LOGSUMEXP
    assert fuse_passes.propose(_target(source, "row_lse")) == []


def test_a_search_for_another_condition_is_not_an_argmax() -> None:
    for change in (("target == x[", "target <= x["), ("where = c;", "where = c + (int)target;")):
        source = ARGMIN.replace(*change)
        assert source != ARGMIN
        assert fuse_passes.propose(_target(source, "nearest")) == []


@pytest.mark.gpu
def test_fused_passes_split_across_lanes_verify_and_beat_the_two_pass_split_on_the_gpu() -> None:
    from cuda_agent.agent.engine import Engine, EngineSettings

    with Engine(EngineSettings(use_cache=False, input_sets=2)) as engine:
        for name in ("cross_entropy", "row_argmax"):
            target = outside(name)
            if name == "row_argmax":
                (inlined,) = inline_helper.propose(target)
                target = replace(reloaded(target, inlined.source), path=target.path)
            baseline = engine.baseline(target)
            assert baseline.usable, baseline.error
            (one_pass,) = fuse_passes.propose(target)
            fused_target = reloaded(target, one_pass.source)
            two = warp_per_output.propose(target)[:2]
            one = warp_per_output.propose(fused_target)[:2]
            results = engine.evaluate(baseline, [*two, *one])
            seen = shown(baseline.target, results)
            assert all(r.verified for r in results), seen
            best_two = max(r.speedup or 0 for r in results[:2])
            best_one = max(r.speedup or 0 for r in results[2:])
            print(f"{name}: two passes split {best_two:.2f}x, one pass split {best_one:.2f}x")
            assert best_one > best_two * 1.1, seen


@pytest.mark.gpu
def test_a_helper_a_pass_fused_and_split_verifies_on_the_gpu() -> None:
    from cuda_agent.agent.engine import Engine, EngineSettings
    from cuda_agent.agent.search import combine

    target = _target(TWO_HELPERS, "row_lse")
    (inlined,) = inline_helper.propose(target)
    written_out = reloaded(target, inlined.source)
    (one_pass,) = fuse_passes.propose(written_out)
    fused_target = reloaded(target, one_pass.source)
    steps = [
        combine(one_pass, split, fused_target, target) for split in warp_per_output.propose(fused_target)
    ]
    with Engine(EngineSettings(use_cache=False, input_sets=2)) as engine:
        baseline = engine.baseline(target)
        assert baseline.usable, baseline.error
        results = engine.evaluate(baseline, [one_pass, *steps[:2]])
        seen = shown(baseline.target, results)
        assert all(r.verified for r in results), seen
        assert max(r.speedup or 0 for r in results) > 2.0, seen
