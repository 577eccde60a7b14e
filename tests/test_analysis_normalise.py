"""Spellings normalised before the rewrites match (agent/analysis/normalise.py): a matmul or a convolution
that loads each factor into a local first gets the same tiled kernels as one that multiplies the loads
directly, and a bounds check ending in `else { return; }` is the bounds check; locals whose values have
side effects, bodies that end otherwise and an else that does something are left as written."""

from __future__ import annotations

from pathlib import Path

import pytest
from cuda_agent.agent.analysis.normalise import inlined_loop_locals, without_else_return
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


ROWS = """/* cuda-agent
[sizes]
rows = 4096
cols = 1024
[args]
x = { role = "input", dtype = "float32", shape = ["rows", "cols"] }
y = { role = "output", dtype = "float32", shape = ["rows"] }
rows = { role = "scalar", dtype = "int32", value = "rows" }
cols = { role = "scalar", dtype = "int32", value = "cols" }
[launch]
block = [256]
grid = ["ceil_div(rows, 256)"]
*/
__global__ void row_sum(const float* x, float* y, int rows, int cols) {
    int r = blockIdx.x * blockDim.x + threadIdx.x;
    if (r < rows) {
        float s = 0.0f;
        for (int c = 0; c < cols; c++) s += x[r * cols + c];
        y[r] = s;
    }ELSE
}
"""


def _rows(alternative: str) -> KernelTarget:
    (target,) = load_targets(ROOT / "row_sum.cu", ROWS.replace("ELSE", alternative)).targets
    assert target.spec is not None
    return target


@pytest.mark.parametrize("alternative", [" else { return; }", " else return;", "\n    else {\n    }"])
def test_a_bounds_check_ending_in_else_return_is_the_bounds_check(alternative: str) -> None:
    from cuda_agent.agent.optimize import PROPOSERS

    plain = PROPOSERS["rewrite:warp-per-output"](_rows(""))
    respelled = without_else_return(_rows(alternative))
    assert "else" not in respelled.source and respelled.source.count("if (r < rows)") == 1
    found = PROPOSERS["rewrite:warp-per-output"](_rows(alternative))
    assert plain and [c.description for c in found] == [c.description for c in plain]


@pytest.mark.parametrize(
    "source",
    [
        # an else that does something
        ROWS.replace("ELSE", " else { y[r] = 0.0f; }"),
        # not the kernel's last statement: returning skips what follows
        ROWS.replace("ELSE", " else { return; }\n    y[0] = 1.0f;"),
    ],
)
def test_an_else_that_matters_is_kept(source: str) -> None:
    (target,) = load_targets(ROOT / "row_sum.cu", source).targets
    assert without_else_return(target) is target
