"""The warp-scan rewrite: a thread per row keeping a running total along its row (a cumulative sum, a
CDF, a compaction's offsets) becomes a warp per row taking 32 elements at a time, the running total by a
shuffle scan; the stores before the update see the total up to the element before (an exclusive scan),
those after it the total with the element. Each candidate compiles; what is not such a scan is left
alone. The GPU-marked test verifies them against the originals and the oracles at ragged sizes."""

from __future__ import annotations

from pathlib import Path

import pytest
from cuda_agent.agent.device_source import device_source
from cuda_agent.agent.proposers.rewrites import warp_scan
from cuda_agent.agent.targets import KernelTarget, load_targets
from cuda_agent.sandbox.compile import compile_kernel

from tests.test_rewrite_warp_per_output import _target, body_of, needs_compiler, shown

CUMSUM = Path(__file__).resolve().parents[1] / "bench" / "kernels" / "holdout" / "cumsum_rows.cu"

# Each row's counts turned into offsets (an exclusive scan, integers), the way a per-row compaction or a
# CSR builder writes it; the row total written after the loop.
OFFSETS = """/* cuda-agent
[sizes]
R = 16384
L = 512
[args]
offsets = { role = "output", dtype = "int32", shape = ["R", "L"] }
totals = { role = "output", dtype = "int32", shape = ["R"] }
counts = { role = "input", dtype = "int32", shape = ["R", "L"], init = { low = 0, high = 9 } }
R = { role = "scalar", dtype = "int32", value = "R" }
L = { role = "scalar", dtype = "int32", value = "L" }
[launch]
block = [64]
grid = ["(R + 63) // 64"]
[verify]
sizes = [{ R = 45, L = 77 }]
oracle = { offsets = "torch.cumsum(counts, 1).int() - counts", totals = "counts.sum(1).int()" }
*/
__global__ void row_offsets(int* offsets, int* totals, const int* counts, int R, int L)
{
    int r = threadIdx.x + blockIdx.x * blockDim.x;
    if (r < R) {
        int offset = 0;
        for (int j = 0; j < L; ++j) {
            offsets[r * L + j] = offset;
            offset = offset + counts[r * L + j];
        }
        totals[r] = offset;
    }
}
"""

# A running mean along each row, its element read into a local first.
RUNNING_MEAN = """/* cuda-agent
[sizes]
B = 4096
T = 1000
[args]
y = { role = "output", dtype = "float32", shape = ["B", "T"] }
x = { role = "input", dtype = "float32", shape = ["B", "T"] }
B = { role = "scalar", dtype = "int32", value = "B" }
T = { role = "scalar", dtype = "int32", value = "T" }
[launch]
block = [256]
grid = ["ceil_div(B, 256)"]
[verify]
sizes = [{ B = 33, T = 47 }]
oracle = { y = "torch.cumsum(x, 1) / torch.arange(1, x.shape[1] + 1)" }
reduction = "T"
*/
__global__ void running_mean(float* y, const float* x, int B, int T)
{
    int b = blockIdx.x * blockDim.x + threadIdx.x;
    if (b >= B) return;
    float acc = 0.0f;
    for (int t = 0; t < T; t++) {
        float v = x[b * T + t];
        acc += v;
        y[b * T + t] = acc / (t + 1);
    }
}
"""


def cumsum() -> KernelTarget:
    (target,) = load_targets(CUMSUM).targets
    return target


@needs_compiler
def test_a_cumulative_sum_along_rows_becomes_a_warp_per_row_with_a_shuffle_scan() -> None:
    candidates = warp_scan.propose(cumsum())
    assert [c.launch.block for c in candidates if c.launch] == [(256,), (128,), (256,)]
    # first four chunks a step: their four loads issued before any of their scans
    body = body_of(candidates[0], "cumsum_rows")
    assert "int row = blockIdx.x * (blockDim.x / 32) + threadIdx.x / 32;" in body
    assert "for (int chunk = 0; chunk < L; chunk += 128) {" in body
    loads = body.index("mine[g] = j < L ? (float)(x[row * L + j]) : (float)0;")
    scans = body.index("float other = __shfl_up_sync(0xffffffffu, mine[g], offset);")
    assert (
        loads < scans < body.index("running = before + mine[g];") < body.index("out[row * L + j] = running")
    )
    assert "running = before + __shfl_sync(0xffffffffu, mine[g], 31);" in body
    # then one chunk a step
    body = body_of(candidates[2], "cumsum_rows")
    assert "for (int chunk = 0; chunk < L; chunk += 32) {" in body
    assert "__shfl_up_sync(0xffffffffu, mine, offset)" in body
    assert "if (lane_in) { out[row * L + j] = running; }" in body
    assert "running = before + __shfl_sync(0xffffffffu, mine, 31);" in body
    assert "reassociated" in candidates[0].assumptions[0]
    for candidate in candidates:
        assert compile_kernel(device_source(candidate.source), "cumsum_rows").ok


@needs_compiler
def test_stores_before_the_update_see_the_exclusive_total_and_a_store_after_the_loop_is_lane_zeros() -> None:
    *_, candidate = warp_scan.propose(_target(OFFSETS, "row_offsets"))  # one chunk a step
    body = body_of(candidate, "row_offsets")
    exclusive = "offset = before + (lane > 0 ? previous : (int)0);"
    assert "const int previous = __shfl_up_sync(0xffffffffu, mine, 1);" in body
    assert exclusive in body and "if (lane_in) { offsets[r * L + j] = offset; }" in body
    assert body.index(exclusive) < body.index("offset = before + mine;")
    assert "int mine = lane_in ? (int)(counts[r * L + j]) : (int)0;" in body
    assert "if (lane == 0) totals[r] = offset;" in body  # the row total, once
    assert compile_kernel(device_source(candidate.source), "row_offsets").ok
    four = body_of(warp_scan.propose(_target(OFFSETS, "row_offsets"))[0], "row_offsets")
    assert "const int previous = __shfl_up_sync(0xffffffffu, mine[g], 1);" in four
    assert four.index(exclusive) < four.index("if (lane_in) { offsets[r * L + j] = offset; }")


@needs_compiler
def test_a_value_read_into_a_local_first_and_a_store_reading_the_index_are_kept() -> None:
    *_, candidate = warp_scan.propose(_target(RUNNING_MEAN, "running_mean"))
    body = body_of(candidate, "running_mean")
    assert "float mine = lane_in ? ((float)(x[b * T + t])) : (float)0;" in body
    assert "if (lane_in) { y[b * T + t] = acc / (t + 1); }" in body
    assert compile_kernel(device_source(candidate.source), "running_mean").ok


@pytest.mark.parametrize(
    "source", [CUMSUM.read_text(), OFFSETS, RUNNING_MEAN], ids=["inclusive", "exclusive", "mean"]
)
def test_every_lane_reaches_every_shuffle(source: str) -> None:
    """A shuffle under the full mask that some lanes skip (behind `lane > 0 ? ... :` or an `if`) is an
    illegal instruction on the GPU (the exclusive scan's first version: cudaErrorIllegalInstruction on the
    H100): no shuffle may sit in a branch or a conditional expression inside the scan's chunk loop."""
    name = source.split("__global__ void ")[1].split("(")[0]
    for candidate in warp_scan.propose(_target(source, name)):
        chunk_loop = body_of(candidate, name).split("for (int chunk", 1)[1]
        for line in chunk_loop.splitlines():
            if "__shfl" in line:
                assert "?" not in line and not line.strip().startswith("if"), line


@pytest.mark.parametrize(
    ("written", "instead"),
    [
        ("running += x[row * L + j];", "running = 0.9f * running + x[row * L + j];"),  # not a sum
        ("out[row * L + j] = running;", "out[row] = running;"),  # a store that does not move with j
        ("out[row * L + j] = running;", "out[row * L + j] = running; if (running > 9.0f) break;"),
        ("running += x[row * L + j];", "running += x[row * L + j]; running += 1.0f;"),  # updated twice
        ("running += x[row * L + j];", "running += x[j * R + row];"),  # neighbours already read together
        ("running += x[row * L + j];", "running += x[row * L + j] * (out[row] = 1.0f);"),  # an effect
    ],
)  # fmt: skip
def test_what_is_not_a_running_sum_a_warp_can_scan_is_left_alone(written: str, instead: str) -> None:
    source = CUMSUM.read_text()
    assert written in source
    assert warp_scan.propose(_target(source.replace(written, instead), "cumsum_rows")) == []


def test_an_exclusive_scan_in_place_is_left_alone() -> None:
    """`x[j] = total; total += x[j];` reads back what it stored: a chunk's loads would come after its
    stores in the original order but before them in the warp's."""
    in_place = OFFSETS.replace("offsets[r * L + j] = offset;", "((int*)counts)[r * L + j] = offset;")
    assert warp_scan.propose(_target(in_place, "row_offsets")) == []


@pytest.mark.gpu
def test_scans_verify_and_beat_the_originals_on_the_gpu() -> None:
    from cuda_agent.agent.engine import Engine, EngineSettings

    with Engine(EngineSettings(use_cache=False, input_sets=2)) as engine:
        targets = [cumsum(), _target(OFFSETS, "row_offsets"), _target(RUNNING_MEAN, "running_mean")]
        for target in targets:
            baseline = engine.baseline(target)
            assert baseline.usable, baseline.error
            results = engine.evaluate(baseline, warp_scan.propose(target))
            seen = shown(baseline.target, results)
            print(target.kernel.name, seen)
            assert results and all(r.verified for r in results), seen
            assert max(r.speedup or 0 for r in results) > 2.0, seen
