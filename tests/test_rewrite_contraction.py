"""The contraction rewrite on CPU: a thread per (row, col) summing a product of a row factor and a col
factor becomes the tiled SGEMM, whatever the loop order, the strides, the index names, the place the sum
is kept in and the epilogue; each candidate compiles, keeps the signature and resolves its launch. The
GPU-marked test verifies the rewrites against the originals on the H200."""

from __future__ import annotations

from pathlib import Path

import pytest
from cuda_agent.agent.candidates import Candidate
from cuda_agent.agent.proposers.rewrites.contraction import propose
from cuda_agent.agent.targets import KernelTarget, load_targets

from tests.test_rewrite_warp_per_output import ATTENTION, GEMV, _target, check, needs_compiler, shown

ROOT = Path(__file__).resolve().parents[1]
NAIVE = (ROOT / "bench" / "kernels" / "matmul_naive.cu").read_text()
SPEC = NAIVE[NAIVE.index("/* cuda-agent") : NAIVE.index("*/") + 2]


# A·Bᵀ: B stored as N x K, read along k.
TRANSPOSED = (
    NAIVE.replace("B[k * N + col]", "B[col * K + k]")
    .replace('shape = ["K", "N"]', 'shape = ["N", "K"]')
    .replace('C = "A @ B"', 'C = "A @ B.T"')
)


def loads(candidate: Candidate) -> list[str]:
    """The values the row and col factor tiles are loaded with (first tile)."""
    found = [
        line.split("] = ", 1)[1]
        for line in candidate.source.splitlines()
        if "_next[" in line and "] = (" in line
    ]
    return found[:2]


@needs_compiler
def test_naive_matmul_becomes_tiled_sgemm() -> None:
    target = load_targets(ROOT / "bench" / "kernels" / "matmul_naive.cu").find("matmul")
    assert target is not None
    candidates = check(target, propose)
    assert {c.launch.grid for c in candidates if c.launch} >= {("ceil_div(N, 128)", "ceil_div(M, 128)")}
    a, b = loads(candidates[0])
    assert a == "(r < M && c < K) ? (A[r * K + c]) : 0.0f;"
    assert b == "(r < K && c < N) ? (B[r * N + c]) : 0.0f;"
    assert "C[row * N + col] = acc;" in candidates[0].source


@needs_compiler
def test_matmul_with_other_names_and_an_epilogue() -> None:
    kernel = """
__global__ void matmul(const float* __restrict__ A, const float* __restrict__ B, float* C,
                       int M, int N, int K) {
  const unsigned r = threadIdx.y + blockIdx.y * blockDim.y;
  const unsigned c = threadIdx.x + blockIdx.x * blockDim.x;
  if (r >= M || c >= N) return;
  float sum = 0.f;
  for (int i = 0; i < K; i++) {
    sum = sum + B[i * N + c] * A[K * r + i];
  }
  C[r * N + c] = fmaxf(sum, 0.0f);  // fused ReLU
}"""
    first = check(_target(SPEC + kernel, "matmul"), propose)[0]
    assert "C[r * N + c] = fmaxf(sum, 0.0f);" in first.source and "if (!(r >= M || c >= N)) {" in first.source


@needs_compiler
@pytest.mark.parametrize(
    ("operand", "k_fast"),
    [("B[col * K + k]", True), ("B[k * N + col]", False)],  # A·Bᵀ reads B along k; A·B along col
)
def test_either_stride_of_an_operand_is_loaded_along_memory(operand: str, k_fast: bool) -> None:
    source = NAIVE.replace("B[k * N + col]", operand)
    candidate = check(_target(source, "matmul"), propose)[0]
    expected = "e % BK, c = col0 + e / BK" if k_fast else "e / BN, c = col0 + e % BN"
    assert expected in candidate.source


OUTSIDE = ROOT / "bench" / "kernels" / "outside"
COVARIANCE = (OUTSIDE / "covariance.cu").read_text()


@needs_compiler
def test_a_covariance_is_a_contraction_of_centred_columns() -> None:
    candidate = check(_target(COVARIANCE, "covariance"), propose)[0]
    a, b = loads(candidate)
    assert a == "(r < m && c < n) ? (data[c * m + r] - mean[r]) : 0.0f;"
    assert b == "(r < n && c < m) ? (data[r * m + c] - mean[c]) : 0.0f;"
    assert "const int r = row0 + e % BM, c = k0 + e / BM;" in candidate.source  # along the column
    assert "if (j1 < m && j2 < m && j2 >= j1) {" in candidate.source  # the triangle, as written
    assert "symmat[j2 * m + j1] = cov;" in candidate.source


SYRK = (OUTSIDE / "syrk.cu").read_text()


@needs_compiler
def test_a_sum_kept_in_the_output_element_is_kept_in_registers() -> None:
    candidate = check(_target(SYRK, "syrk"), propose)[0]
    a, _ = loads(candidate)
    assert a == "(r < N && c < M) ? (alpha) * (A[r * M + c]) : 0.0f;"
    epilogue = candidate.source.split("float sum = accum[i_][j_];")[1]
    assert epilogue.index("C[i * N + j] *= beta;") < epilogue.index("C[i * N + j] += sum;")


@needs_compiler
def test_attention_scores_with_a_batch_axis_and_pointer_locals() -> None:
    candidates = check(_target(ATTENTION, "scores"), propose)
    assert candidates[0].launch is not None and candidates[0].launch.grid[2] == "BH"
    a, b = loads(candidates[0])
    assert "(q + (size_t)(blockIdx.z) * T * D + r * D)[c]" in a
    assert "(k + (size_t)(blockIdx.z) * T * D + c * D)[r]" in b
    # the masked scores end their output, not the thread's other outputs
    assert "if (t2 > t) { out[t2] = -INFINITY; continue; }" in candidates[0].source


@needs_compiler
def test_a_sum_that_starts_elsewhere_gets_the_tiles_sum_added_where_the_loop_was() -> None:
    candidate = check(
        _target(NAIVE.replace("float acc = 0.0f;", "float acc = C[row * N + col];"), "matmul"), propose
    )[0]
    epilogue = candidate.source.split("float sum = accum[i][j];")[1]
    assert epilogue.index("float acc = C[row * N + col];") < epilogue.index("acc += sum;")


LLM_SCORES = (OUTSIDE / "attention_scores.cu").read_text()


@needs_compiler
def test_a_flat_index_taken_apart_is_a_batch_of_contractions() -> None:
    """llm.c's scores: idx over (b, h, t, t2), split with % and /, keys and queries through pointers."""
    candidates = check(_target(LLM_SCORES, "attention_scores"), propose)
    assert candidates[0].launch is not None
    assert candidates[0].launch.grid == ("ceil_div(T, 128)", "ceil_div(T, 128)", "B * NH")
    a, b = loads(candidates[0])
    assert "{r} * (C * 3)".replace("{r}", "r") in a and "[c]" in a  # the query row r, along the head
    assert "c * (C * 3)" in b and "+ C)[r]" in b  # the key row c
    source = candidates[0].source
    assert "const int idx = (blockIdx.z * T + out_row) * T + out_col;" in source
    # past the tile's edge a flat index would wrap into the next row: bounded before it is used
    assert "if (out_row < T && out_col < T && (!(idx >= total))) {" in source


@pytest.mark.parametrize(
    "kernel",
    [
        GEMV + """__global__ void gemv(const float* A, const float* x, float* y, int M, int N) {
    int i = blockIdx.x * blockDim.x + threadIdx.x;
    if (i < M) { float s = 0; for (int j = 0; j < N; ++j) s += A[i * N + j] * x[j]; y[i] = s; }
}""",
        # a factor that depends on both outputs' indices
        NAIVE.replace("A[row * K + k] * B[k * N + col]", "A[row * K + k] * B[k * N + col] * A[col + row]"),
        # a max, not a sum
        NAIVE.replace("acc += A[row * K + k] * B[k * N + col];", "acc = fmaxf(acc, A[row * K + k]);"),
        # a query that moves with the flat index itself, not only with its row and batch pieces
        LLM_SCORES.replace("query = inp + b * T * C3", "query = inp + idx % 7 + b * T * C3"),
        # a store before the loop to what the loop reads
        SYRK.replace("C[i * N + j] *= beta;", "C[i * N + j] *= beta; ((float*)A)[i] = 0;"),
    ],
)  # fmt: skip
def test_not_a_contraction_it_can_tile(kernel: str) -> None:
    name = kernel.split("__global__ void ")[1].split("(")[0]
    assert propose(_target(kernel, name)) == []


@pytest.mark.gpu
def test_contractions_verify_and_beat_the_originals_on_the_gpu() -> None:
    from cuda_agent.agent.engine import Engine, EngineSettings

    targets: list[KernelTarget] = [
        _target(COVARIANCE, "covariance"),
        _target(SYRK, "syrk"),
        _target(ATTENTION, "scores"),
        _target(TRANSPOSED, "matmul"),
        _target(LLM_SCORES, "attention_scores"),
    ]
    with Engine(EngineSettings(use_cache=False, input_sets=2)) as engine:
        for target in targets:
            baseline = engine.baseline(target)
            assert baseline.usable, baseline.error
            results = engine.evaluate(baseline, propose(target))
            seen = shown(baseline.target, results)
            assert all(r.verified for r in results), seen
            assert any(r.status == "faster" for r in results), seen
