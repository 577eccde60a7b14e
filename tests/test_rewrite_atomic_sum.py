"""The atomic-sum rewrite: an atomic add in a loop into a place the loop does not move waits for the
loop's end, the thread's values summed in a register first; the loop is then a plain sum that a warp or a
block splits (one atomic a block). A thread an element adding into its NCHW channel (`atomicAdd(&sums[(i /
HW) % C], x[i])`, a naive draft's channel sum) becomes a block a (n, c) row through the chain row-loop ->
atomic-sum -> warp-per-output. What must keep its atomics as they are is left alone: an atomic whose old
value is used (a slot claimed in a queue), a place that moves with the loop (a histogram's bin), an array
read elsewhere, a loop that may return before its end."""

from __future__ import annotations

from pathlib import Path

import pytest
from cuda_agent.agent import optimize
from cuda_agent.agent.device_source import device_source
from cuda_agent.agent.proposers.rewrites import atomic_sum, row_loop, warp_per_output
from cuda_agent.agent.targets import KernelTarget, load_targets
from cuda_agent.sandbox.compile import compile_kernel

from tests.test_rewrite_promote import chained
from tests.test_rewrite_warp_per_output import _target, body_of, needs_compiler, shown

CHANNEL_SUM = Path(__file__).resolve().parents[1] / "bench" / "kernels" / "holdout" / "channel_sum_fp64.cu"

# A loss accumulated a row at a time, its total added at every element (a course's first draft).
ROW_LOSS = """/* cuda-agent
[sizes]
R = 4096
L = 2048
[args]
total = { role = "inout", dtype = "float32", shape = ["R"], init = "zeros" }
pred = { role = "input", dtype = "float32", shape = ["R", "L"] }
label = { role = "input", dtype = "float32", shape = ["R", "L"] }
R = { role = "scalar", dtype = "int32", value = "R" }
L = { role = "scalar", dtype = "int32", value = "L" }
[launch]
block = [128]
grid = ["ceil_div(R, block.x)"]
[verify]
sizes = [{ R = 37, L = 101 }]
oracle = { total = "((pred - label) ** 2).sum(1)" }
reduction = "L"
*/
__global__ void row_loss(float* total, const float* pred, const float* label, int R, int L)
{
    int r = blockIdx.x * blockDim.x + threadIdx.x;
    if (r >= R) return;
    for (int j = 0; j < L; j++) {
        float d = pred[r * L + j] - label[r * L + j];
        atomicAdd(&total[r], d * d);
    }
}
"""


def channel_sum() -> KernelTarget:
    (target,) = load_targets(CHANNEL_SUM).targets
    return target


@needs_compiler
def test_a_thread_an_element_adding_into_its_channel_becomes_a_block_a_row_with_one_atomic() -> None:
    (rows, *_) = optimize.PROPOSERS[row_loop.PROPOSER](channel_sum())
    (summed,) = chained(channel_sum(), rows, atomic_sum.PROPOSER)
    body = body_of(summed, "channel_sum_atomic_fp64")
    assert "double sums_sum = 0;" in body and "sums_sum += x[idx];" in body
    assert body.index("atomicAdd(&sums[c], sums_sum);") > body.index("sums_sum += x[idx];")
    assert body.count("atomicAdd") == 1
    blocks = [
        c
        for c in chained(channel_sum(), summed, warp_per_output.PROPOSER)
        if "one block per" in c.description
    ]
    assert blocks, "the row's sum split across a block"
    split = body_of(blocks[0], "channel_sum_atomic_fp64")
    assert "atomicAdd(&sums[c], sums_sum);" in split and "__shfl_xor_sync" in split
    for each in (summed, blocks[0]):
        assert compile_kernel(device_source(each.source), "channel_sum_atomic_fp64").ok


@needs_compiler
def test_a_rows_atomic_at_every_element_is_added_once_after_its_loop() -> None:
    (candidate,) = atomic_sum.propose(_target(ROW_LOSS, "row_loss"))
    body = body_of(candidate, "row_loss")
    assert "float total_sum = 0;" in body and "total_sum += d * d;" in body
    assert (
        body.rstrip().endswith("atomicAdd(&total[r], total_sum);\n}")
        or "atomicAdd(&total[r], total_sum);" in body
    )
    assert "reassociated" in candidate.assumptions[0]
    assert compile_kernel(device_source(candidate.source), "row_loss").ok
    # then a warp a row: the chain the search follows
    assert any(
        "one warp per" in c.description
        for c in chained(_target(ROW_LOSS, "row_loss"), candidate, warp_per_output.PROPOSER)
    )


ATOMIC = "atomicAdd(&total[r], d * d);"


@pytest.mark.parametrize(
    "instead",
    [
        "int slot = (int)atomicAdd(&total[r], d * d); ((float*)pred)[slot] = d;",  # a slot: its old value
        "atomicAdd(&total[(int)label[r * L + j]], d * d);",  # a histogram's bin
        "atomicAdd(&total[r + j % 2], d * d);",  # the place moves with j
        "atomicAdd(&total[r], d * d); if (total[r] > 1.0f) return;",  # read while it is summed
        "atomicAdd(&total[r], d * d); if (d > 9.0f) return;",  # the loop left early
        "atomicMax((int*)&total[r], (int)d);",  # not an add
    ],
)  # fmt: skip
def test_atomics_that_must_stay_where_they_are_are_left_alone(instead: str) -> None:
    assert atomic_sum.propose(_target(ROW_LOSS.replace(ATOMIC, instead), "row_loss")) == []


@pytest.mark.gpu
def test_summed_atomics_verify_and_beat_the_originals_on_the_gpu() -> None:
    from cuda_agent.agent.engine import Engine, EngineSettings

    with Engine(EngineSettings(use_cache=False, input_sets=2)) as engine:
        loss = _target(ROW_LOSS, "row_loss")
        baseline = engine.baseline(loss)
        assert baseline.usable, baseline.error
        (summed,) = optimize.PROPOSERS[atomic_sum.PROPOSER](loss)
        results = engine.evaluate(baseline, [summed, *chained(loss, summed, warp_per_output.PROPOSER)[:2]])
        seen = shown(baseline.target, results)
        print(seen)
        assert results and all(r.verified for r in results), seen
        assert max(r.speedup or 0 for r in results) > 2.0, seen

        target = channel_sum()
        baseline = engine.baseline(target)
        assert baseline.usable, baseline.error
        (rows, *_) = optimize.PROPOSERS[row_loop.PROPOSER](target)
        (summed,) = chained(target, rows, atomic_sum.PROPOSER)
        split = chained(target, summed, warp_per_output.PROPOSER)[:3]
        results = engine.evaluate(baseline, [summed, *split])
        seen = shown(baseline.target, results)
        print(seen)
        assert results and all(r.verified for r in results), seen
        assert max(r.speedup or 0 for r in results) > 5.0, seen
