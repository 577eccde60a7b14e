"""The untile rewrite on CPU: a matmul tiled through shared memory, in the styles course code writes it
(if/else or ternary or zero-first stores, tile-width macros, thread indices in locals or read directly,
phases counted one by one or in elements, A·B or A·Bᵀ), is read through its tiles as the contraction
they stage and given the contraction rewrite's candidates; each compiles, resolves its launch and
re-reads with it. Where a step is not proven (a barrier missing, a tile stored or read off the thread's
own place, a loop that does more than the sum) nothing is offered. The GPU-marked test verifies the
rewrites against the tiled originals on the H200."""

from __future__ import annotations

from pathlib import Path

import pytest
from cuda_agent.agent.candidates import Candidate
from cuda_agent.agent.optimize import PROPOSERS
from cuda_agent.agent.proposers.rewrites.untile import PREFIX, PROPOSER, propose
from cuda_agent.agent.targets import KernelTarget, load_targets

from tests.test_rewrite_contraction import in_template_order, loads
from tests.test_rewrite_warp_per_output import _target, check, needs_compiler, shown

OUTSIDE = Path(__file__).resolve().parents[1] / "bench" / "kernels" / "outside"


def spec(block: int = 16, b_shape: str = '["K", "N"]', oracle: str = "A @ B") -> str:
    return f"""/* cuda-agent
[sizes]
M = 4096
N = 4096
K = 4096

[args]
A = {{ role = "input",  dtype = "float32", shape = ["M", "K"] }}
B = {{ role = "input",  dtype = "float32", shape = {b_shape} }}
C = {{ role = "output", dtype = "float32", shape = ["M", "N"] }}
M = {{ role = "scalar", dtype = "int32", value = "M" }}
N = {{ role = "scalar", dtype = "int32", value = "N" }}
K = {{ role = "scalar", dtype = "int32", value = "K" }}

[launch]
block = [{block}, {block}]
grid = ["ceil_div(N, block.x)", "ceil_div(M, block.y)"]

[verify]
sizes = [{{ M = 129, N = 67, K = 100 }}]
oracle = {{ C = "{oracle}" }}
reduction = "K"

[roofline]
flops = "2 * M * N * K"
*/
"""


# The CUDA guide's form: block and thread indices in locals, if/else stores, ceil-divided phases.
GUIDE = (
    spec()
    + """#define TILE_WIDTH 16
__global__ void matmul(const float* A, const float* B, float* C, int M, int N, int K)
{
    __shared__ float As[TILE_WIDTH][TILE_WIDTH];
    __shared__ float Bs[TILE_WIDTH][TILE_WIDTH];
    int bx = blockIdx.x, by = blockIdx.y;
    int tx = threadIdx.x, ty = threadIdx.y;
    int row = by * TILE_WIDTH + ty;
    int col = bx * TILE_WIDTH + tx;
    float value = 0.0f;
    for (int ph = 0; ph < (K + TILE_WIDTH - 1) / TILE_WIDTH; ++ph) {
        if (row < M && ph * TILE_WIDTH + tx < K)
            As[ty][tx] = A[row * K + ph * TILE_WIDTH + tx];
        else
            As[ty][tx] = 0.0f;
        if (ph * TILE_WIDTH + ty < K && col < N)
            Bs[ty][tx] = B[(ph * TILE_WIDTH + ty) * N + col];
        else
            Bs[ty][tx] = 0.0f;
        __syncthreads();
        for (int k = 0; k < TILE_WIDTH; ++k)
            value += As[ty][k] * Bs[k][tx];
        __syncthreads();
    }
    if (row < M && col < N)
        C[row * N + col] = value;
}
"""
)

# Ternary stores from column and row locals, 32x32 tiles in one declaration, fmaf, `(K - 1) / T + 1`.
TERNARY = (
    spec(block=32)
    + """#define BLOCK_SIZE 32
__global__ void sgemm(const float* __restrict__ A, const float* __restrict__ B,
                      float* __restrict__ C, int M, int N, int K) {
  __shared__ float sA[BLOCK_SIZE][BLOCK_SIZE], sB[BLOCK_SIZE][BLOCK_SIZE];
  const int tx = threadIdx.x;
  const int ty = threadIdx.y;
  const int r = blockIdx.y * blockDim.y + ty;
  const int c = blockIdx.x * blockDim.x + tx;
  float acc = 0.f;
  const int tiles = (K - 1) / BLOCK_SIZE + 1;
  for (int t = 0; t < tiles; t++) {
    const int a_col = t * BLOCK_SIZE + tx;
    const int b_row = t * BLOCK_SIZE + ty;
    sA[ty][tx] = (r < M && a_col < K) ? A[r * K + a_col] : 0.0f;
    sB[ty][tx] = (b_row < K && c < N) ? B[b_row * N + c] : 0.0f;
    __syncthreads();
    for (int i = 0; i < BLOCK_SIZE; i++)
      acc = fmaf(sA[ty][i], sB[i][tx], acc);
    __syncthreads();
  }
  if (r < M && c < N) C[r * N + c] = acc;
}
"""
)

# threadIdx read directly, 0 stored first and then the guarded load, phases counted in elements.
DIRECT = (
    spec()
    + """#define TILE 16
__global__ void gemm_tiled(const float* A, const float* B, float* C, int M, int N, int K)
{
    __shared__ float a_tile[TILE][TILE];
    __shared__ float b_tile[TILE][TILE];
    int row = blockIdx.y * TILE + threadIdx.y;
    int col = blockIdx.x * TILE + threadIdx.x;
    float sum = 0.0f;
    for (int t = 0; t < K; t += TILE) {
        a_tile[threadIdx.y][threadIdx.x] = 0.0f;
        if (row < M && t + threadIdx.x < K)
            a_tile[threadIdx.y][threadIdx.x] = A[row * K + t + threadIdx.x];
        b_tile[threadIdx.y][threadIdx.x] = 0.0f;
        if (t + threadIdx.y < K && col < N)
            b_tile[threadIdx.y][threadIdx.x] = B[(t + threadIdx.y) * N + col];
        __syncthreads();
        #pragma unroll
        for (int k = 0; k < TILE; ++k) {
            sum = sum + a_tile[threadIdx.y][k] * b_tile[k][threadIdx.x];
        }
        __syncthreads();
    }
    if (row < M && col < N) {
        C[row * N + col] = sum;
    }
}
"""
)

# C = A·Bᵀ: B is N x K, its tile loaded along k by rows of B and read back at [tx][k].
TRANSPOSED = (
    spec(b_shape='["N", "K"]', oracle="A @ B.T")
    + """#define TILE_WIDTH 16
__global__ void matmul_nt(const float* A, const float* B, float* C, int M, int N, int K)
{
    __shared__ float As[TILE_WIDTH][TILE_WIDTH];
    __shared__ float Bs[TILE_WIDTH][TILE_WIDTH];
    int tx = threadIdx.x, ty = threadIdx.y;
    int row = blockIdx.y * TILE_WIDTH + ty;
    int col = blockIdx.x * TILE_WIDTH + tx;
    int b_row = blockIdx.x * TILE_WIDTH + ty;  // the row of B (a column of C) this thread loads
    float value = 0.0f;
    for (int ph = 0; ph < ceil(K / (float)TILE_WIDTH); ++ph) {
        if (row < M && ph * TILE_WIDTH + tx < K) As[ty][tx] = A[row * K + ph * TILE_WIDTH + tx];
        else As[ty][tx] = 0.0f;
        if (b_row < N && ph * TILE_WIDTH + tx < K) Bs[ty][tx] = B[b_row * K + ph * TILE_WIDTH + tx];
        else Bs[ty][tx] = 0.0f;
        __syncthreads();
        for (int k = 0; k < TILE_WIDTH; ++k)
            value += As[ty][k] * Bs[tx][k];
        __syncthreads();
    }
    if (row < M && col < N) C[row * N + col] = value;
}
"""
)


def name_of(source: str) -> str:
    return source.split("__global__ void ")[1].split("(")[0]


def untiled(source: str) -> tuple[KernelTarget, list[Candidate]]:
    """The kernel's candidates, each checked (compiles, keeps the file outside the body, resolves its
    launch), prefixed and proposed as this rewrite's, and re-read with its launch written."""
    target = _target(source, name_of(source))
    candidates = in_template_order(check(target, propose))
    for candidate in candidates:
        assert candidate.description.startswith(PREFIX) and candidate.proposer == PROPOSER
        assert "tiled contraction over" in candidate.description
    for written in PROPOSERS[PROPOSER](target):
        again = load_targets(target.path, written.source).find(target.kernel.name)
        assert again is not None and again.spec is not None and written.launch is not None
        assert again.spec.launch == written.launch
    return target, candidates


@needs_compiler
def test_the_guides_tiled_matmul_is_the_naive_product_tiled_again() -> None:
    _, candidates = untiled(GUIDE)
    assert candidates[0].launch is not None
    assert candidates[0].launch.grid == ("ceil_div(N, 128)", "ceil_div(M, 128)")
    a, b = loads(candidates[0])
    assert a == "(r < M && c < K) ? (A[r * K + c]) : 0.0f;"  # the stored value at (row, kk)
    assert b == "(r < K && c < N) ? (B[r * N + c]) : 0.0f;"
    assert "C[row * N + col] = value;" in candidates[0].source  # the user's store, under the user's check
    assert "if (row < M && col < N) {" in candidates[0].source
    assert "__shared__ float As[TILE_WIDTH]" not in candidates[0].source


@needs_compiler
def test_ternary_stores_and_32_wide_tiles_through_column_locals() -> None:
    _, candidates = untiled(TERNARY)
    a, b = loads(candidates[0])
    assert a == "(r_ < M && c_ < K) ? (A[r_ * K + c_]) : 0.0f;"  # r and c are the user's: fresh names
    assert b == "(r_ < K && c_ < N) ? (B[r_ * N + c_]) : 0.0f;"
    assert "C[r * N + c] = acc;" in candidates[0].source


@needs_compiler
def test_thread_indices_read_directly_and_phases_counted_in_elements() -> None:
    _, candidates = untiled(DIRECT)
    a, b = loads(candidates[0])
    assert a == "(r < M && c < K) ? (A[r * K + c]) : 0.0f;"
    assert b == "(r < K && c < N) ? (B[r * N + c]) : 0.0f;"
    assert "C[row * N + col] = sum;" in candidates[0].source


@needs_compiler
def test_a_times_b_transposed_reads_b_along_k() -> None:
    _, candidates = untiled(TRANSPOSED)
    _, b = loads(candidates[0])
    assert b == "(r < K && c < N) ? (B[c * K + r]) : 0.0f;"  # B[col][kk], loaded along k
    assert "const int r = k0 + e % BK, c = col0 + e / BK;" in candidates[0].source
    assert any("exact in float" in a for a in candidates[0].assumptions)  # ceil(K / (float)T) phases


@needs_compiler
def test_the_course_exercise_in_the_bench() -> None:
    _, candidates = untiled((OUTSIDE / "matmul_tiled.cu").read_text())
    a, b = loads(candidates[0])
    assert a == "(r < rowsA && c < colsA) ? (A[r * colsA + c]) : 0.0f;"
    assert b == "(r < colsA && c < colsB) ? (B[r * colsB + c]) : 0.0f;"
    assert "C[row * colsB + col] = sum;" in candidates[0].source


@needs_compiler
@pytest.mark.parametrize(
    ("written", "instead", "kept"),
    [
        # an epilogue after the sum stays the user's, once per output
        ("C[row * N + col] = value;", "C[row * N + col] = fmaxf(value, 0.0f);", "= fmaxf(value, 0.0f);"),
        # a tile padded against bank conflicts
        ("float As[TILE_WIDTH][TILE_WIDTH];", "float As[TILE_WIDTH][TILE_WIDTH + 1];", "= value;"),
        # the phase count in a local, rounded up in floating point
        (
            "    float value = 0.0f;\n    for (int ph = 0; ph < (K + TILE_WIDTH - 1) / TILE_WIDTH; ++ph)",
            "    int phases = ceil(K / (float)TILE_WIDTH);\n    float value = 0.0f;\n"
            "    for (int ph = 0; ph < phases; ++ph)",
            "C[row * N + col] = value;",
        ),
    ],
)
def test_other_spellings_of_the_guides_kernel(written: str, instead: str, kept: str) -> None:
    assert written in GUIDE
    _, candidates = untiled(GUIDE.replace(written, instead))
    assert kept in candidates[0].source


SUM = "value += As[ty][k] * Bs[k][tx];"
BARRIER = "        __syncthreads();\n"


@pytest.mark.parametrize(
    "kernel",
    [
        # the barrier after the inner loop is missing: the next phase's stores race with its reads
        GUIDE.replace(BARRIER + "    }", "    }"),
        # the barrier before it is missing
        GUIDE.replace(BARRIER + "        for", "        for"),
        # a tile stored at a place that is not the thread's own
        GUIDE.replace("As[ty][tx]", "As[ty][(tx + 1) % TILE_WIDTH]"),
        GUIDE.replace("As[ty][tx]", "As[tx][tx]"),
        # a tile stored twice in a phase
        GUIDE.replace(BARRIER + "        for", "        Bs[ty][tx] = 1.0f;\n" + BARRIER + "        for"),
        # the inner loop does more than the sum
        GUIDE.replace(SUM, "{ " + SUM + " if (value > 1e30f) value = 1e30f; }"),
        # the sum is scaled inside the loop
        GUIDE.replace(SUM, "value = 0.5f * value + As[ty][k] * Bs[k][tx];"),
        # a three-way product
        GUIDE.replace(SUM, "value += As[ty][k] * Bs[k][tx] * As[ty][k];"),
        # a tile read off the thread's row and column
        GUIDE.replace(SUM, "value += As[ty][k] * Bs[k][ty];"),
        # an index the forms cannot follow
        GUIDE.replace("A[row * K + ph * TILE_WIDTH + tx]", "A[(row * K + ph * TILE_WIDTH + tx) % (M * K)]"),
        # a tile loaded past K without a guard (and read there)
        GUIDE.replace("if (ph * TILE_WIDTH + ty < K && col < N)", "if (col < N)"),
        # too few phases to reach K
        GUIDE.replace("ph < (K + TILE_WIDTH - 1) / TILE_WIDTH", "ph < K / TILE_WIDTH"),
        # a guard on the row that the final check does not imply
        GUIDE.replace("if (row < M && ph", "if (row < K && ph"),
        # threads leave before the barriers
        GUIDE.replace("    float value = 0.0f;\n", "    float value = 0.0f;\n    if (row >= M) return;\n"),
        # a block that is not the tiles' shape
        GUIDE.replace("block = [16, 16]", "block = [32, 8]"),
        GUIDE.replace("block = [16, 16]", "block = [8, 8]"),
        # the sum does not start from 0
        GUIDE.replace("float value = 0.0f;", "float value = 1.0f;"),
    ],
)
def test_not_offered_where_a_step_is_not_proven(kernel: str) -> None:
    assert propose(_target(kernel, "matmul")) == []


TEXTBOOK = Path(__file__).resolve().parent / "kernels" / "tiled" / "textbook_matmul.cu"


def test_a_spec_less_textbook_tiled_matmul_is_untiled_under_its_inferred_spec() -> None:
    """No spec written: the inference reads the 16 x 16 block from its TILE steps (through the
    `by`/`ty` locals), and the rewrite takes the tiles it loads as the product they stage."""
    (target,) = load_targets(TEXTBOOK).targets
    assert target.spec is not None and target.spec.inferred, target.note
    assert target.spec.launch.block == (16, 16) and target.spec.verify_sizes == ({"n": 144},)
    candidates = check(target, propose)
    assert all(c.description.startswith(PREFIX) for c in candidates)


UNCHECKED = TEXTBOOK.with_name("textbook_matmul_unchecked.cu")


def test_a_tiled_matmul_that_checks_no_bounds_is_untiled_assuming_whole_tiles() -> None:
    """The textbook's first version: no check on the loads or the store, `n / TILE` phases. It is
    right only where n is a multiple of the tile, which the candidates state; the naive kernel they
    start from checks its bounds."""
    (target,) = load_targets(UNCHECKED).targets
    assert target.spec is not None and target.spec.verify_sizes == ({"n": 144},)
    candidates = check(target, propose)
    assert all("n is a multiple of 16" in " ".join(c.assumptions) for c in candidates)
    # the sum value-initialised, as C++ course code writes it
    braced = UNCHECKED.read_text().replace("float acc = 0;", "float acc {};")
    (target,) = load_targets(UNCHECKED, braced).targets
    assert len(check(target, propose)) == len(candidates)


@pytest.mark.parametrize(
    ("change", "why"),
    [
        ("for (int phase = 0; phase < (n + TILE - 1) / TILE; ++phase)", "a last phase past the edge"),
        ("for (int phase = 0; phase < n / 8; ++phase)", "phases that are not tiles"),
        ("for (int phase = 0; phase <= n / TILE; ++phase)", "one phase too many"),
    ],
)
def test_an_unchecked_tiled_matmul_whose_phases_are_not_whole_tiles_is_left_alone(change: str, why: str):
    source = UNCHECKED.read_text()
    changed = source.replace("for (int phase = 0; phase < n / TILE; ++phase)", change)
    assert changed != source
    (target,) = load_targets(UNCHECKED, changed).targets
    assert target.spec is not None
    assert propose(target) == [], why


@pytest.mark.gpu
def test_untiled_matmuls_verify_and_beat_the_tiled_originals_on_the_gpu() -> None:
    from cuda_agent.agent.engine import Engine, EngineSettings

    targets = [_target(source, name_of(source)) for source in (GUIDE, TERNARY, DIRECT, TRANSPOSED)]
    (bench,) = load_targets(OUTSIDE / "matmul_tiled.cu").targets
    (textbook,) = load_targets(TEXTBOOK).targets  # its spec inferred: verified against the original
    (unchecked,) = load_targets(UNCHECKED).targets
    with Engine(EngineSettings(use_cache=False, input_sets=2)) as engine:
        for target in [*targets, bench, textbook, unchecked]:
            baseline = engine.baseline(target)
            assert baseline.usable, baseline.error
            results = engine.evaluate(baseline, propose(target))
            seen = shown(baseline.target, results)
            assert results and all(r.verified for r in results), seen
            assert any(r.status == "faster" for r in results), seen
