"""Scalar replacement on CPU: an element a loop sums into, whose place does not move with the loop, is
loaded once, summed in a register and stored once, starting from the number stored just before the
loop; after it the loop is a reduction the warp and contraction rewrites take. Not offered where the
place moves or is computed inside the loop, or the loop may be left early. The gpu-marked test checks
the results on the H200."""

from __future__ import annotations

from pathlib import Path

import pytest
from cuda_agent.agent import optimize, search
from cuda_agent.agent.candidates import Candidate
from cuda_agent.agent.device_source import device_source
from cuda_agent.agent.proposers.rewrites import contraction, promote, vector_loop, warp_per_output
from cuda_agent.agent.targets import KernelTarget, load_targets
from cuda_agent.sandbox.compile import compile_kernel

from tests.test_rewrite_warp_per_output import GEMV, _target, body_of, needs_compiler, shown

OUTSIDE = Path(__file__).resolve().parents[1] / "bench" / "kernels" / "outside"


def outside(name: str) -> KernelTarget:
    (target,) = load_targets(OUTSIDE / f"{name}.cu").targets
    return target


def then(target: KernelTarget, candidate: Candidate) -> KernelTarget:
    found = load_targets(target.path, candidate.source).find(target.kernel.name)
    assert found is not None and found.spec is not None
    return found


def chained(target: KernelTarget, base: Candidate, proposer: str) -> list[Candidate]:
    """The proposer's candidates on `base`'s file, as the search chains them: each carries both changes,
    and its file and its launch say how it runs (through optimize.PROPOSERS, which write each rewrite's
    launch into its file; a bare rewrite's file keeps the original's launch, and a step on it that keeps
    its file's launch would be timed with the original's grid)."""
    base_target = then(target, base)
    steps = optimize.PROPOSERS[proposer](base_target)
    return [search.combine(base, step, base_target, target) for step in steps]


@needs_compiler
def test_gesummvs_two_sums_in_memory_become_registers_and_then_a_warp_a_row() -> None:
    target = outside("gesummv")
    (candidate,) = promote.propose(target)
    body = body_of(candidate, "gesummv")
    assert "float tmp_sum = 0.0f;" in body and "float y_sum = 0.0f;" in body  # from `tmp[i] = 0.0f;`
    assert "tmp_sum += A[i * n + j] * x[j];" in body and "tmp[i] = tmp_sum;" in body
    assert any("not also reached through another pointer" in a for a in candidate.assumptions)
    assert compile_kernel(device_source(candidate.source), "gesummv").ok
    split_rows = warp_per_output.propose(then(target, candidate))
    warp = next(c for c in split_rows if c.description.startswith("one warp per i"))
    split = body_of(warp, "gesummv")
    assert "for (int j = lane; j < n; j += 32) {" in split
    assert "if (lane == 0) y[i] = ALPHA * tmp[i] + BETA * y[i];" in split  # lane 0 reads its own stores
    assert compile_kernel(device_source(warp.source), "gesummv").ok


@needs_compiler
def test_syrk_keeps_its_scaled_element_and_is_then_a_contraction() -> None:
    target = outside("syrk")
    (candidate,) = promote.propose(target)
    body = body_of(candidate, "syrk")
    assert "float C_sum = C[i * N + j];" in body  # scaled by beta just before: loaded, not a number
    assert "C[i * N + j] = C_sum;" in body
    assert contraction.propose(then(target, candidate))


@needs_compiler
def test_a_c89_counter_declared_between_the_start_and_the_loop_keeps_the_chain_going() -> None:
    # PolyBench's C89 spelling: the sum's element zeroed, then `int k;`, then `for (k = 0; ...)`. The
    # register starts from the stored 0, so the lane split sees a plain sum, and the vector loop takes
    # a counter declared before it (nothing reads it after the loop).
    kernel = """__global__ void mv(const float* A, const float* x, float* y, int M, int N) {
    int r = blockIdx.x * blockDim.x + threadIdx.x;
    if (r < M) {
        y[r] = 0.0f;
        int k;
        for (k = 0; k < N; k++) y[r] += A[r * N + k] * x[k];
    }
}"""
    target = _target(GEMV + kernel, "mv")
    (kept,) = promote.propose(target)
    assert "float y_sum = 0.0f;" in body_of(kept, "mv") and "y[r] = 0.0f;" not in body_of(kept, "mv")
    (warp, *_) = warp_per_output.propose(then(target, kept))
    (vectors,) = vector_loop.propose(then(target, warp))
    body = body_of(vectors, "mv")
    assert "int k0 = lane * 4;" in body and "for (; k0 + 4 <= N; k0 += (32) * 4)" in body
    assert "for (int k = k0; k < N && k < k0 + 4; ++k)" in body
    result = compile_kernel(device_source(vectors.source), "mv")
    assert result.ok, [d.message for d in result.diagnostics]
    # read after the loop: the counter's last value matters, and the vector loop leaves it alone
    after = kernel.replace("y[r] += A[r * N + k] * x[k];", "y[r] += A[r * N + k] * x[k];\n        y[r] += k;")
    (kept,) = promote.propose(_target(GEMV + after, "mv"))
    assert all(
        vector_loop.propose(then(target, w)) == [] for w in warp_per_output.propose(then(target, kept))
    )


@pytest.mark.parametrize(
    "kernel",
    [
        # the element moves with the loop
        GEMV + """__global__ void gemv(const float* A, const float* x, float* y, int M, int N) {
    int i = blockIdx.x * blockDim.x + threadIdx.x;
    if (i < M) { for (int j = 0; j < N; ++j) y[j] += A[i * N + j] * x[j]; }
}""",
        # its place is computed in the loop
        GEMV + """__global__ void gemv(const float* A, const float* x, float* y, int M, int N) {
    int i = blockIdx.x * blockDim.x + threadIdx.x;
    if (i < M) { for (int j = 0; j < N; ++j) { int at = i; y[at] += A[i * N + j] * x[j]; } }
}""",
        # the loop may be left before its end
        GEMV + """__global__ void gemv(const float* A, const float* x, float* y, int M, int N) {
    int i = blockIdx.x * blockDim.x + threadIdx.x;
    if (i < M) { for (int j = 0; j < N; ++j) { y[i] += A[i * N + j] * x[j]; if (y[i] > 1) return; } }
}""",
    ],
)  # fmt: skip
def test_not_offered_where_the_element_moves_or_the_loop_can_end_early(kernel: str) -> None:
    assert promote.propose(_target(kernel, "gemv")) == []


@pytest.mark.gpu
def test_promoted_and_split_gesummv_verifies_and_is_faster_on_the_gpu() -> None:
    from cuda_agent.agent.engine import Engine, EngineSettings

    target = outside("gesummv")
    (promoted,) = promote.propose(target)
    split = warp_per_output.propose(then(target, promoted))[0]
    with Engine(EngineSettings(use_cache=False, input_sets=2)) as engine:
        baseline = engine.baseline(target)
        assert baseline.usable, baseline.error
        results = engine.evaluate(baseline, [promoted, split])
    seen = shown(baseline.target, results)
    assert all(r.verified for r in results) and results[1].status == "faster", seen
