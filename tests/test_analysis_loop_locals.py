"""A loop's locals written where they are read (agent/analysis/loop_locals.py): a matmul or a convolution
that loads each factor into a local first gets the same tiled kernels as one that multiplies the loads
directly; locals whose values have side effects, or bodies that end otherwise, are left as written."""

from __future__ import annotations

from pathlib import Path

import pytest
from cuda_agent.agent.analysis.loop_locals import inlined_loop_locals
from cuda_agent.agent.proposers.rewrites import contraction, implicit_gemm
from cuda_agent.agent.targets import KernelTarget, load_targets

ROOT = Path(__file__).resolve().parents[1]
MATMUL = ROOT / "bench" / "kernels" / "matmul_naive.cu"
CONV1D = ROOT / "tests" / "kernels" / "convolutions" / "conv1d_channels.cu"
HALF = ROOT / "tests" / "kernels" / "tensor_cores" / "matmul_half.cu"
SUMMED = "for (int k = 0; k < K; ++k) acc += A[row * K + k] * B[k * N + col];"


def _target(path: Path, written: str, instead: str) -> KernelTarget:
    source = path.read_text()
    assert written in source
    (target,) = [
        t for t in load_targets(path, source.replace(written, instead)).targets if t.spec is not None
    ]
    return target


def _kernels(candidates: list) -> list[tuple[str, object, str]]:
    return [(c.description, c.launch, c.source) for c in candidates]


@pytest.mark.parametrize(
    "instead",
    [
        "for (int k = 0; k < K; ++k) { float a = A[row * K + k]; float b = B[k * N + col]; acc += a * b; }",
        "for (int k = 0; k < K; ++k) { const float a = __ldg(&A[row * K + k]); acc += a * B[k * N + col]; }",
        # a local computed from another
        "for (int k = 0; k < K; ++k) { float a = A[row * K + k]; float ab = a * B[k * N + col]; acc += ab; }",
    ],
)
def test_a_matmul_loading_its_factors_into_locals_gets_the_same_tiled_kernels(instead: str) -> None:
    plain = _kernels(contraction.propose(_target(MATMUL, SUMMED, SUMMED)))
    with_locals = contraction.propose(_target(MATMUL, SUMMED, instead))
    assert plain and len(with_locals) == len(plain)
    if "__ldg" not in instead:  # the loads are spelled the same: the kernels are the same, byte for byte
        assert _kernels(with_locals) == plain


def test_the_locals_keep_their_declared_type() -> None:
    written = "sum += __half2float(A[row * K + k]) * __half2float(B[k * N + col]);"
    target = _target(HALF, written, "float a = A[row * K + k]; float b = B[k * N + col]; sum += a * b;")
    # `float a = A[...]` converts the half element: so does the inlined read (a half product would not)
    inlined = inlined_loop_locals(target)
    assert "sum += ((float)(A[row * K + k])) * ((float)(B[k * N + col]));" in inlined.source
    (candidate,) = contraction.propose(target)
    assert "on the tensor cores" in candidate.description


def test_a_convolution_loading_its_window_into_locals_is_an_implicit_gemm() -> None:
    written = """            for (int q = 0; q < KW; ++q)
                s += inp[(b * Cin + ci) * L + t + q] * wt[(co * Cin + ci) * KW + q];"""
    instead = """            for (int q = 0; q < KW; ++q) {
                float x = inp[(b * Cin + ci) * L + t + q];
                float w = wt[(co * Cin + ci) * KW + q];
                s += x * w;
            }"""
    plain = implicit_gemm.propose(_target(CONV1D, written, written))
    loaded = implicit_gemm.propose(_target(CONV1D, written, instead))
    assert plain and _kernels(loaded) == _kernels(plain)


@pytest.mark.parametrize(
    "instead",
    [
        # a value with a side effect: the load would happen once per read instead of once
        "for (int k = 0; k < K; ++k) { float a = A[row * K + k]; float b = B[k++ * N + col]; acc += a * b; }",
        # a call that may do anything
        "for (int k = 0; k < K; ++k) { float a = fetch(A, row * K + k); acc += a * B[k * N + col]; }",
        # a body that ends in something else than an expression
        "for (int k = 0; k < K; ++k) { float a = A[row * K + k]; if (a != 0.0f) acc += a * B[k * N + col]; }",
        # auto: no type to convert to
        "for (int k = 0; k < K; ++k) { auto a = A[row * K + k]; acc += a * B[k * N + col]; }",
    ],
)
def test_locals_are_left_where_writing_them_in_would_change_what_runs(instead: str) -> None:
    source = MATMUL.read_text().replace(SUMMED, instead)
    if "fetch(" in instead:
        helper = "__device__ float fetch(const float* p, int i) { return p[i]; }\n"
        source = source.replace("__global__ void matmul(", helper + "__global__ void matmul(")
    (target,) = [t for t in load_targets(MATMUL, source).targets if t.spec is not None]
    assert inlined_loop_locals(target) is target
