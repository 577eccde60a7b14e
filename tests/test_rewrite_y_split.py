"""The y-split rewrite on CPU: a thread per output walking a long loop that neighbouring threads already
read together (a column walk) gets its loop split across threads along y, merged through shared memory
by thread y = 0, with the bounds check turned into a flag so every thread reaches the barrier. Not
offered for row walks (the warp rewrite's case) or loops that store. The gpu-marked test checks the
results on the H200."""

from __future__ import annotations

from pathlib import Path

import pytest
from cuda_agent.agent.device_source import device_source
from cuda_agent.agent.proposers.rewrites import y_split
from cuda_agent.agent.targets import KernelTarget, load_targets
from cuda_agent.sandbox.compile import compile_kernel

from tests.test_rewrite_warp_per_output import ARGMAX, GEMV, _target, body_of, needs_compiler, shown

OUTSIDE = Path(__file__).resolve().parents[1] / "bench" / "kernels" / "outside"
COLUMN_SOFTMAX = OUTSIDE.parent / "holdout" / "column_softmax.cu"


def gemv_transposed() -> KernelTarget:
    (target,) = load_targets(OUTSIDE / "gemv_transposed.cu").targets
    return target


@needs_compiler
def test_a_column_walk_is_split_across_threads_along_y() -> None:
    target = gemv_transposed()
    candidates = y_split.propose(target)
    assert [c.launch.block for c in candidates if c.launch] == [(32, 8), (32, 32), (16, 64)]
    assert [c.launch.grid[0] for c in candidates if c.launch][1:] == ["ceil_div(N, 32)", "ceil_div(N, 16)"]
    body = body_of(candidates[0], "gemv_transposed")
    assert "const bool inside = col <= N - 1;" in body  # the check as written, now a flag
    # the thread's rows four at a time (their loads in flight together), then the last few one at a time
    assert "for (; (row0 + 3 * (int)blockDim.y) < M; row0 += 4 * blockDim.y) {" in body
    assert (
        "const int row = row0 + step * blockDim.y;" in body and "for (; row0 < M; row0 += blockDim.y)" in body
    )
    assert body.count("acc += A[row * N + col] * x[row];") == 2
    assert "__syncthreads();" in body and "if (inside && threadIdx.y == 0) {" in body
    for candidate in candidates:
        assert compile_kernel(device_source(candidate.source), "gemv_transposed").ok


@needs_compiler
def test_a_column_argmax_merges_positions_in_order() -> None:
    kernel = ARGMAX.replace("x[IDX(r, c, cols)]", "x[IDX(c, r, rows)]").replace(
        "float best = x[IDX(r, 0, cols)];", "float best = x[IDX(0, r, rows)];"
    )
    (first, _, narrow) = y_split.propose(_target(kernel.replace("{cmp}", ">"), "row_argmax"))
    body = body_of(first, "row_argmax")
    assert "int arg_partial[8][32]" in body and "other_at < arg" in body
    assert "int arg_partial[64][16]" in body_of(narrow, "row_argmax")
    for candidate in (first, narrow):
        assert compile_kernel(device_source(candidate.source), "row_argmax").ok


@pytest.mark.parametrize(
    "kernel",
    [
        # a row walk: the threads along x are a row apart (the warp rewrite splits those)
        GEMV + """__global__ void gemv(const float* A, const float* x, float* y, int M, int N) {
    int i = blockIdx.x * blockDim.x + threadIdx.x;
    if (i < M) { float s = 0; for (int j = 0; j < N; ++j) s += A[i * N + j] * x[j]; y[i] = s; }
}""",
        # a loop that stores as it goes
        GEMV + """__global__ void gemv(const float* A, const float* x, float* y, int M, int N) {
    int j = blockIdx.x * blockDim.x + threadIdx.x;
    if (j < N) { float s = 0; for (int i = 0; i < M; ++i) { s += A[i * N + j]; y[j] = s; } }
}""",
    ],
)  # fmt: skip
def test_not_offered_for_row_walks_or_loops_that_store(kernel: str) -> None:
    assert y_split.propose(_target(kernel, "gemv")) == []


def column_softmax(source: str | None = None) -> KernelTarget:
    (target,) = load_targets(COLUMN_SOFTMAX, source).targets
    return target


@needs_compiler
def test_a_column_softmaxs_three_passes_are_each_split_and_their_results_shared() -> None:
    """The maximum, then the sum against it, then the stores: after each reduction thread y = 0 merges
    and writes the column's value back, so every thread runs the next pass with it."""
    candidates = y_split.propose(column_softmax())
    assert [c.launch.block for c in candidates if c.launch] == [(32, 8), (32, 32), (16, 64)]
    body = body_of(candidates[0], "softmax_dim0")
    assert "m_partial[0][threadIdx.x] = m;" in body and "m = m_partial[0][threadIdx.x];" in body
    assert "s_partial[0][threadIdx.x] = s;" in body and "s = s_partial[0][threadIdx.x];" in body
    assert body.count("y[r * cols + c] = expf(x[r * cols + c] - m) / s;") == 2  # unrolled, then the rest
    assert body.index("m = m_partial[0]") < body.index("float s = 0.0f;") < body.index("s_partial[0][")
    assert "threadIdx.y == 0) {\n        y[" not in body  # the stores are split too, not left to y = 0
    for candidate in candidates:
        assert compile_kernel(device_source(candidate.source), "softmax_dim0").ok


@pytest.mark.parametrize(
    ("change", "why"),
    [
        (("float s = 0.0f;", "float s = x[c];"), "a statement between the passes reads an array"),
        (
            ("y[r * cols + c] = expf(", "y[c] = expf("),
            "a store every iteration makes to the same place",
        ),
        (
            ("s += expf(x[r * cols + c] - m);", "s += expf(x[r * cols + c] - m); y[c] = s;"),
            "a reduction pass that stores",
        ),
    ],
)
def test_passes_not_split_where_a_thread_along_y_could_not_run_them(
    change: tuple[str, str], why: str
) -> None:
    source = COLUMN_SOFTMAX.read_text()
    assert change[0] in source
    assert y_split.propose(column_softmax(source.replace(*change))) == [], why


@pytest.mark.gpu
def test_the_split_column_walk_verifies_and_is_faster_on_the_gpu() -> None:
    from cuda_agent.agent.engine import Engine, EngineSettings

    target = gemv_transposed()
    with Engine(EngineSettings(use_cache=False, input_sets=2)) as engine:
        baseline = engine.baseline(target)
        assert baseline.usable, baseline.error
        results = engine.evaluate(baseline, y_split.propose(target))
        seen = shown(baseline.target, results)
        assert all(r.verified for r in results) and any(r.status == "faster" for r in results), seen
        softmax = column_softmax()
        baseline = engine.baseline(softmax)
        assert baseline.usable, baseline.error
        results = engine.evaluate(baseline, y_split.propose(softmax))
        seen = shown(baseline.target, results)
        assert all(r.verified for r in results) and any(r.status == "faster" for r in results), seen
