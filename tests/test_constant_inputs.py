"""A `__constant__` array the host fills (a convolution's mask) is filled by the sandbox, the same in every
module it loads: left at zero, the original would compute as if every weight were 0, and a candidate that
ignores the mask, or writes zeros, would match it. On CPU: which arrays are found and that compiling
carries them; the gpu-marked test checks that the original now computes with weights and such candidates
are caught, while an honest one passes."""

from __future__ import annotations

from pathlib import Path

import pytest
from cuda_agent.agent.candidates import Candidate
from cuda_agent.agent.compile_environment import compile_in, environment_for
from cuda_agent.agent.constant_inputs import constant_inputs
from cuda_agent.agent.targets import load_targets
from cuda_agent.sandbox.plan import ConstantInput

from tests.test_rewrite_warp_per_output import needs_compiler

# the holdout suite's course convolution, its spec inferred from main()
KERNEL = Path(__file__).resolve().parents[1] / "bench" / "kernels" / "holdout" / "conv2d_constant_mask.cu"


def test_the_host_filled_floating_arrays_are_found() -> None:
    source = """
__constant__ float taps[16], bias[4];
__constant__ int offsets[9];                       // an index table: left alone
static __constant__ double fixed[3] = {1, 2, 3};   // its values are in the source
__constant__ __half gains[8];
namespace filters { __constant__ float inner[4]; } // a mangled symbol
__constant__ float scale;                          // not an array
__global__ void k(float* y) { y[0] = taps[0]; }
"""
    assert constant_inputs(source) == (
        ConstantInput("taps", "float32"),
        ConstantInput("bias", "float32"),
        ConstantInput("gains", "float16"),
    )
    assert constant_inputs("__global__ void k(float* y) { y[0] = 1.0f; }") == ()


@needs_compiler
def test_compiling_carries_the_files_constant_inputs() -> None:
    source = KERNEL.read_text()
    result = compile_in(environment_for(KERNEL), source, "convolution_2d", filename=str(KERNEL), arch="sm_90")
    assert result.ok and result.kernel is not None
    assert result.kernel.constants == (ConstantInput("mask", "float32"),)


@pytest.mark.gpu
def test_a_candidate_that_ignores_the_constant_mask_is_caught_on_the_gpu() -> None:
    from cuda_agent.agent.engine import Engine, EngineSettings

    (target,) = load_targets(KERNEL).targets
    assert target.spec is not None and target.spec.inferred
    source = target.source
    weightless = source.replace("* mask[i * MASK_DIM + j]", "* (1.0f / (MASK_DIM * MASK_DIM))")
    zeros = source.replace("result[row * N + col] = temp;", "result[row * N + col] = 0.0f * temp;")
    honest = source.replace("__global__ void", "__global__ void __launch_bounds__(256)")
    candidates = [
        Candidate(weightless, (16, 16), "the mask read as the host's box filter", "test"),
        Candidate(zeros, (16, 16), "zeros", "test"),
        Candidate(honest, (16, 16), "launch bounds", "test"),
    ]
    with Engine(EngineSettings(use_cache=False, input_sets=2)) as engine:
        baseline = engine.baseline(target)
        assert baseline.usable, baseline.error
        results = engine.evaluate(baseline, candidates)
    verified = {r.candidate.description: bool(r.verified) for r in results}
    assert verified == {
        "the mask read as the host's box filter": False,
        "zeros": False,
        "launch bounds": True,
    }
