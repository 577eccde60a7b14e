"""Contractions in double (scientific codes' GEMMs, float64 pairwise distances) get the contraction
rewrite's first kernel in double: 64x64 tiles whose two buffers a side fit the static 48 KiB of shared
memory, the fragments read from shared memory 16 bytes at a time (two double2s), the sum in double by
`fma` in the original's order over k, the user's statements after the loop on a double. Each compiles
without a stack frame; mixed float and double factors are left alone. The GPU-marked test verifies them
against the originals and the oracles at sizes that are not multiples of the tiles."""

from __future__ import annotations

from pathlib import Path

import pytest
from cuda_agent.agent.device_source import device_source
from cuda_agent.agent.proposers.rewrites.contraction import propose
from cuda_agent.agent.targets import KernelTarget, load_targets
from cuda_agent.sandbox.compile import compile_kernel

from tests.test_rewrite_warp_per_output import _target, needs_compiler, shown

PAIRWISE = Path(__file__).resolve().parents[1] / "bench" / "kernels" / "holdout" / "pairwise_dist_fp64.cu"

# A GEMM in the style of classic benchmark suites: the element type a typedef, alpha and beta in double.
GEMM = """typedef double DATA_TYPE;
/* cuda-agent
[sizes]
NI = 1024
NJ = 1024
NK = 1024
[args]
a = { role = "input", dtype = "float64", shape = ["NI", "NK"] }
b = { role = "input", dtype = "float64", shape = ["NK", "NJ"] }
c = { role = "inout", dtype = "float64", shape = ["NI", "NJ"] }
alpha = { role = "scalar", dtype = "float64", value = 1.5 }
beta = { role = "scalar", dtype = "float64", value = 1.2 }
ni = { role = "scalar", dtype = "int32", value = "NI" }
nj = { role = "scalar", dtype = "int32", value = "NJ" }
nk = { role = "scalar", dtype = "int32", value = "NK" }
[launch]
block = [32, 8]
grid = ["ceil_div(NJ, 32)", "ceil_div(NI, 8)"]
[verify]
sizes = [{ NI = 67, NJ = 45, NK = 29 }]
oracle = { c = "alpha * (a @ b) + beta * c" }
reduction = "NK"
*/
__global__ void gemm_kernel(DATA_TYPE *a, DATA_TYPE *b, DATA_TYPE *c, DATA_TYPE alpha, DATA_TYPE beta,
                            int ni, int nj, int nk)
{
    int j = blockIdx.x * blockDim.x + threadIdx.x;
    int i = blockIdx.y * blockDim.y + threadIdx.y;
    if ((i < ni) && (j < nj)) {
        c[i * nj + j] *= beta;
        for (int k = 0; k < nk; k++) {
            c[i * nj + j] += alpha * a[i * nk + k] * b[k * nj + j];
        }
    }
}
"""


def pairwise() -> KernelTarget:
    (target,) = load_targets(PAIRWISE).targets
    return target


def double_candidate(target: KernelTarget) -> str:
    (candidate,) = propose(target)
    assert "64x64 shared-memory tiles" in candidate.description
    assert "the double sum" in candidate.assumptions[0]
    result = compile_kernel(device_source(candidate.source), target.kernel.name)
    assert result.ok and result.kernel is not None, [d.message for d in result.diagnostics]
    usage = result.kernel.resources
    assert usage.stack_bytes == 0 and usage.spill_store_bytes == 0, usage
    body = candidate.source.split(f"void {target.kernel.name}(")[1]
    assert "float" not in body.split("// A tiled contraction", 1)[1]  # nothing rounded to float
    assert "double As[2][BK][BM + 4];" in body and "double accum[4 * 1][4 * 1] = {};" in body
    assert "const double2 v_hi = *reinterpret_cast<const double2*>(" in body
    return body


@needs_compiler
def test_float64_pairwise_distances_are_tiled_in_double() -> None:
    body = double_candidate(pairwise())
    assert "accum[i_][j_] = fma(a_frag[i_] - b_frag[j_], a_frag[i_] - b_frag[j_], accum[i_][j_]);" in body
    assert "double sum = accum[i_][j_];" in body and "out[i * M + j] = sqrt(sum);" in body


@needs_compiler
def test_a_double_gemm_through_a_typedef_keeps_its_epilogue_in_double() -> None:
    body = double_candidate(_target(GEMM, "gemm_kernel"))
    assert "= fma(a_frag[i_], b_frag[j_], accum[i_][j_]);" in body


def test_float_and_double_factors_together_are_left_alone() -> None:
    mixed = (
        PAIRWISE.read_text()
        .replace("const double* y", "const float* y")
        .replace('y   = { role = "input",  dtype = "float64"', 'y   = { role = "input",  dtype = "float32"')
    )
    assert "const float* y" in mixed
    assert propose(_target(mixed, "pairwise_dist")) == []


@pytest.mark.gpu
def test_double_contractions_verify_and_beat_the_originals_on_the_gpu() -> None:
    from cuda_agent.agent.engine import Engine, EngineSettings

    with Engine(EngineSettings(use_cache=False, input_sets=2)) as engine:
        for target in (pairwise(), _target(GEMM, "gemm_kernel")):
            baseline = engine.baseline(target)
            assert baseline.usable, baseline.error
            results = engine.evaluate(baseline, propose(target))
            seen = shown(baseline.target, results)
            assert results and all(r.verified for r in results), seen
            assert max(r.speedup or 0 for r in results) > 2.0, seen
