"""Contractions of half and bfloat16 factors on the tensor cores (`rewrite:contraction` through
`_mma_tile`): a thread per output summing products of 16-bit elements in float becomes WMMA tiles, each
tile in its factor's memory order (row- or column-major fragments), the user's epilogue kept. Offered only
where each factor is one element as stored (conversions around it allowed), both of one type. The
GPU-marked test verifies the rewrites against the PyTorch oracles at odd sizes and times them."""

from __future__ import annotations

from pathlib import Path

import pytest
from cuda_agent.agent.proposers.rewrites.contraction import propose
from cuda_agent.agent.targets import KernelTarget, load_targets

from tests.test_rewrite_warp_per_output import check, needs_compiler, shown

KERNELS = Path(__file__).resolve().parent / "kernels" / "tensor_cores"
HALF = (KERNELS / "matmul_half.cu").read_text()
SCORES = (KERNELS / "scores_bf16.cu").read_text()
GRAM = (KERNELS / "gram_half.cu").read_text()
# a flat thread index taken apart, the sum kept in half, the products spelled with __hmul
FLAT = HALF.replace(
    """    int row = blockIdx.y * blockDim.y + threadIdx.y;
    int col = blockIdx.x * blockDim.x + threadIdx.x;
    if (row < M && col < N) {
        float sum = 0.0f;
        for (int k = 0; k < K; ++k) {
            sum += __half2float(A[row * K + k]) * __half2float(B[k * N + col]);
        }
        C[row * N + col] = __float2half(sum);
    }""",
    """    int idx = blockIdx.x * blockDim.x + threadIdx.x;
    int row = idx / N, col = idx % N;
    if (idx < M * N) {
        half sum = 0;
        for (int k = 0; k < K; k++)
            sum += __hmul(A[row * K + k], B[k * N + col]);
        C[row * N + col] = sum;
    }""",
).replace(
    'block = [16, 16]\ngrid = ["ceil_div(N, block.x)", "ceil_div(M, block.y)"]',
    'block = [128]\ngrid = ["ceil_div(M * N, 128)"]',
)


def _target(source: str) -> KernelTarget:
    (target,) = load_targets(KERNELS / "kernel.cu", source).targets
    assert target.spec is not None
    return target


def _fragments(source: str) -> list[str]:
    """The layouts of the A and B fragments, in that order."""
    return [line.split("wmma::")[-1].split(">")[0] for line in source.splitlines() if "wmma::matrix_" in line]


@needs_compiler
@pytest.mark.parametrize(
    ("source", "fragments", "grid"),
    [
        # A walks k (row-major), B walks the columns (row-major)
        (HALF, ["row_major", "row_major"], ("ceil_div(N, 128)", "ceil_div(M, 128)")),
        # q and k both walk the head dimension: B is column-major; the batch-head stays on z
        (SCORES, ["row_major", "col_major"], ("ceil_div(T, 128)", "ceil_div(T, 128)", "BH")),
        # both factors walk down columns of X: A is column-major
        (GRAM, ["col_major", "row_major"], ("ceil_div(d, 128)", "ceil_div(d, 128)")),
        (FLAT, ["row_major", "row_major"], ("ceil_div(N, 128)", "ceil_div(M, 128)")),
    ],
)
def test_a_contraction_of_16_bit_factors_runs_on_the_tensor_cores(
    source: str, fragments: list[str], grid: tuple[str, ...]
) -> None:
    (candidate,) = check(_target(source), propose)
    assert "on the tensor cores" in candidate.description
    assert candidate.launch is not None and candidate.launch.grid == grid and candidate.block[0] == 256
    assert "#include <mma.h>" in candidate.source and "wmma::mma_sync(" in candidate.source
    assert _fragments(candidate.source) == fragments
    assert any("tensor cores" in a for a in candidate.assumptions)


def test_the_epilogue_and_the_element_types_are_kept() -> None:
    assert "col = idx % N" in FLAT  # the flat variant was written in
    (half,) = propose(_target(HALF))
    assert "C[row * N + col] = __float2half(sum);" in half.source
    # the elements are copied as stored: 16 bytes at a time (asynchronously), one by one at the edges
    assert "__pipeline_memcpy_async(to, &(A[r * K + c]), 16);" in half.source
    assert "? A[r * K + (c + v)] : __float2half(0.0f);" in half.source
    (scores,) = propose(_target(SCORES))
    assert "scores[((size_t)bh * T + i) * T + j] = dot * scale;" in scores.source
    assert "__nv_bfloat16 As[2][BM][BK + 8];" in scores.source  # a typedef (bf16) of the same type
    # WMMA takes half from Volta (sm_70) on, bfloat16 from Ampere (sm_80): older GPUs are not offered them
    assert (half.min_arch, scores.min_arch) == (70, 80)


# a sum kept in half, spelled with the half intrinsics
HALF_SUM = HALF.replace("float sum = 0.0f;", "half sum = __float2half(0.0f);").replace(
    "C[row * N + col] = __float2half(sum);", "C[row * N + col] = sum;"
)
SUMMED = "sum += __half2float(A[row * K + k]) * __half2float(B[k * N + col]);"


@needs_compiler
@pytest.mark.parametrize(
    "spelled",
    [
        "sum = __hfma(A[row * K + k], B[k * N + col], sum);",
        "sum = __hadd(sum, __hmul(A[row * K + k], B[k * N + col]));",
    ],
)
def test_a_sum_in_half_spelled_with_intrinsics_runs_on_the_tensor_cores(spelled: str) -> None:
    assert SUMMED in HALF_SUM
    (candidate,) = check(_target(HALF_SUM.replace(SUMMED, spelled)), propose)
    assert "on the tensor cores" in candidate.description
    # the tiles hold the elements themselves; the float sum is added to the half one where the loop was
    assert "? A[r * K + (c + v)] : __float2half(0.0f);" in candidate.source
    body = candidate.source.split("void matmul_half(")[1]
    assert "float sum_ = smem.staged[lr][lc];" in body and "sum += sum_;" in body
    assert body.index("sum += sum_;") < body.index("C[row * N + col] = sum;")


BF16_B = (
    HALF.replace("const __half* B", "const __nv_bfloat16* B")
    .replace('B = { role = "input", dtype = "float16"', 'B = { role = "input", dtype = "bfloat16"')
    .replace("#include <cuda_fp16.h>", "#include <cuda_fp16.h>\n#include <cuda_bf16.h>")
    .replace("__half2float(B[", "__bfloat162float(B[")
)
BOUNDED = HALF.replace(
    "__global__ void matmul_half(", "__global__ void __launch_bounds__(128) matmul_half("
).replace("block = [16, 16]", "block = [16, 8]")


@pytest.mark.parametrize(
    "source",
    [
        # a factor that is more than an element: rounding alpha * a to half would change it
        HALF.replace("__half2float(A[row * K + k])", "2.5f * __half2float(A[row * K + k])"),
        # factors of two 16-bit types: no fragment multiplies them together
        BF16_B,
        # a block bound the 256-thread tiles do not fit
        BOUNDED,
    ],
)
def test_no_tensor_cores_where_they_would_not_compute_the_same(source: str) -> None:
    assert source != HALF
    assert propose(_target(source)) == []


@pytest.mark.gpu
def test_tensor_core_contractions_verify_and_beat_the_originals_on_the_gpu() -> None:
    from cuda_agent.agent.engine import Engine, EngineSettings

    with Engine(EngineSettings(use_cache=False, input_sets=3)) as engine:
        for source in (HALF, SCORES, GRAM):
            target = _target(source)
            baseline = engine.baseline(target)
            assert baseline.usable, baseline.error
            results = engine.evaluate(baseline, propose(target))
            original = baseline.timing.median_ms if baseline.timing else float("nan")
            for r in results:
                timed = r.comparison.candidate.median_ms if r.comparison else float("nan")
                print(f"{target.kernel.name}: {timed:.4f} ms against {original:.4f} ms")
            seen = shown(baseline.target, results)
            assert results and all(r.verified for r in results), seen
            assert all(r.status == "faster" for r in results), seen
