"""CSR sparse matrix-vector products, the scalar kernel of every sparse tutorial: the spec can say what a
row pointer is (`init = { dist = "offsets", low, high }`: 0, then each the one before plus a count from
[low, high)), the holdout kernel's oracle computes what the kernel does (real torch on the CPU, against
the kernel's loop in Python), and the warp-per-output rewrite splits each row's entries across a warp
(the "vector" CSR kernel) though the loop starts at a row pointer: the analysis counts a loop's start
among what moves with the thread. The GPU-marked test verifies it against the original."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest
from cuda_agent.agent.device_source import device_source
from cuda_agent.agent.proposers.rewrites.warp_per_output import propose
from cuda_agent.agent.spec import complete_sizes, resolve
from cuda_agent.agent.targets import KernelTarget, load_targets
from cuda_agent.sandbox.compile import compile_kernel
from cuda_agent.sandbox.oracle import constants_of, oracle_function

from tests.test_oracle import needs_torch
from tests.test_rewrite_warp_per_output import _target, body_of, needs_compiler, shown

CSR = Path(__file__).resolve().parents[1] / "bench" / "kernels" / "holdout" / "spmv_csr.cu"


def csr() -> KernelTarget:
    (target,) = load_targets(CSR).targets
    return target


def test_row_pointers_are_drawn_as_offsets_at_every_size() -> None:
    spec = csr().spec
    assert spec is not None
    for sizes in (spec.sizes, complete_sizes(spec, spec.verify_sizes[0])):
        problem, _ = resolve(spec, sizes)
        (row_ptr,) = [a for a in problem.arguments if a.name == "row_ptr"]
        dist = row_ptr.distribution
        assert (
            dist.kind == "offsets" and dist.low == sizes["max_row"] // 7 and dist.high == sizes["max_row"] + 1
        )


@pytest.mark.parametrize(
    ("init", "message"),
    [
        ('{ dist = "offsets", low = -1, high = 4 }', "would shrink them"),
        ('{ dist = "offsets", low = 5, high = 5 }', "is empty"),
        ('{ dist = "offsets", mean = 3 }', "mean applies to"),
    ],
)
def test_offsets_that_are_not_row_pointers_are_refused_on_their_key(init: str, message: str) -> None:
    source = CSR.read_text().replace('{ dist = "offsets", low = "max_row // 7", high = "max_row + 1" }', init)
    errors = load_targets(CSR, source).spec_errors
    assert any(message in e.message for e in errors), errors


def test_float_offsets_are_refused() -> None:
    source = (
        CSR.read_text()
        .replace(
            'row_ptr = { role = "input",  dtype = "int32"', 'row_ptr = { role = "input",  dtype = "float32"'
        )
        .replace("const int* row_ptr", "const float* row_ptr")
    )
    errors = load_targets(CSR, source).spec_errors
    assert any("offsets are indices: an integer dtype" in e.message for e in errors), errors


@needs_torch
def test_the_oracle_sums_each_rows_entries_as_the_kernel_does() -> None:
    import torch

    spec = csr().spec
    assert spec is not None
    sizes = complete_sizes(spec, spec.verify_sizes[0])
    problem, _ = resolve(spec, sizes)
    rng = np.random.default_rng(7)
    rows, width = sizes["rows"], sizes["max_row"]
    counts = rng.integers(width // 7, width + 1, size=rows)
    row_ptr = np.concatenate([[0], np.cumsum(counts)]).astype(np.int32)
    col_idx = rng.integers(0, rows, size=rows * width).astype(np.int32)
    values = rng.standard_normal(rows * width).astype(np.float32)
    x = rng.standard_normal(rows).astype(np.float32)
    expected = np.array(
        [
            sum(float(values[j]) * float(x[col_idx[j]]) for j in range(row_ptr[r], row_ptr[r + 1]))
            for r in range(rows)
        ]
    )
    function, _ = oracle_function(problem, constants_of(problem, {"num_rows": rows}), torch)
    (y,) = function(*(torch.from_numpy(a) for a in (row_ptr, col_idx, values, x)))
    np.testing.assert_allclose(y.numpy(), expected, rtol=1e-4, atol=1e-4)


@needs_compiler
def test_each_rows_entries_are_split_across_a_warp_from_its_row_pointer() -> None:
    candidates = propose(csr())
    assert candidates
    body = body_of(candidates[0], "spmv_csr_scalar")
    assert "int row = blockIdx.x * (blockDim.x / 32) + threadIdx.x / 32;" in body
    assert "for (int jj = row_start + lane; jj < row_end; jj += 32)" in body
    assert (
        "dot += __shfl_xor_sync(0xffffffffu, dot, offset);" in body and "if (lane == 0) y[row] = dot;" in body
    )
    for candidate in candidates:
        assert compile_kernel(device_source(candidate.source), "spmv_csr_scalar").ok


SPELLED_FLAT = """/* cuda-agent
[sizes]
rows = 65536
K = 256
[args]
a = { role = "input", dtype = "float32", shape = ["rows", "K"] }
s = { role = "output", dtype = "float32", shape = ["rows"] }
rows = { role = "scalar", dtype = "int32", value = "rows" }
K = { role = "scalar", dtype = "int32", value = "K" }
[launch]
block = [256]
grid = ["ceil_div(rows, 256)"]
*/
__global__ void row_sums(const float* a, float* s, int rows, int K)
{
    int row = blockIdx.x * blockDim.x + threadIdx.x;
    if (row < rows) {
        float acc = 0.0f;
        for (int k = row * K; k < row * K + K; ++k) acc += a[k];
        s[row] = acc;
    }
}
"""


@needs_compiler
def test_a_loop_that_starts_at_the_threads_row_is_split_too() -> None:
    """`for (k = row * K; ...) a[k]`: the offset `k` alone does not move with the thread, its start does."""
    (first, *_) = propose(_target(SPELLED_FLAT, "row_sums"))
    assert "for (int k = row * K + lane; k < row * K + K; k += 32)" in body_of(first, "row_sums")


@pytest.mark.gpu
def test_the_vector_csr_kernel_verifies_and_beats_the_scalar_one_on_the_gpu() -> None:
    from cuda_agent.agent.engine import Engine, EngineSettings

    with Engine(EngineSettings(use_cache=False, input_sets=2)) as engine:
        for target in (csr(), _target(SPELLED_FLAT, "row_sums")):
            baseline = engine.baseline(target)
            assert baseline.usable, baseline.error
            results = engine.evaluate(baseline, propose(target))
            seen = shown(baseline.target, results)
            assert results and all(r.verified for r in results), seen
            assert max(r.speedup or 0 for r in results) > 1.5, seen
