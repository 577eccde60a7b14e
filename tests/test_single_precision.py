"""single-precision: float code that unsuffixed literals made double gets its literals suffixed (and
math.h's constants cast), in the kernel and the helpers it calls; never where the user wrote a double."""

from __future__ import annotations

from pathlib import Path

import pytest
from cuda_agent.agent.proposers.transforms.single_precision import propose_single_precision
from cuda_agent.agent.targets import KernelTarget

from tests.test_transforms import ROOT, SPEC_1D, assert_compiles, changed_lines, target_of

ARGS = (
    'x = { role = "input", dtype = "float32", shape = ["n"] }\n'
    'y = { role = "output", dtype = "float32", shape = ["n"] }'
)

# A first-draft tanh GELU, as course code writes it: double literals and M_PI in float code, through a
# helper of its own.
GELU = (
    SPEC_1D.format(args=ARGS)
    + """\
#include <math.h>
#define EPS 1e-12
__device__ float cube(float v) { return v * v * v * 1.0; }

__global__ void gelu(const float* x, float* y, int n)
{
    int i = blockIdx.x * blockDim.x + threadIdx.x;
    if (i < n) {
        float v = x[i];
        y[i] = 0.5 * v * (1.0 + tanhf(sqrt(2.0 / M_PI) * (v + 0.044715 * cube(v))))
               + 1e-12 * EPS;
    }
}
"""
)


def test_literals_and_constants_in_the_kernel_and_its_helpers_become_float(tmp_path: Path) -> None:
    target = target_of(tmp_path, GELU, "gelu")
    (candidate,) = propose_single_precision(target)
    assert_compiles(target, candidate)
    assert changed_lines(target.source, candidate.source) == [
        (
            "__device__ float cube(float v) { return v * v * v * 1.0; }",
            "__device__ float cube(float v) { return v * v * v * 1.0f; }",
        ),
        (
            "        y[i] = 0.5 * v * (1.0 + tanhf(sqrt(2.0 / M_PI) * (v + 0.044715 * cube(v))))",
            "        y[i] = 0.5f * v * (1.0f + tanhf(sqrt(2.0f / ((float)M_PI)) * "
            "(v + 0.044715f * cube(v))))",
        ),
        ("               + 1e-12 * EPS;", "               + 1e-12f * ((float)EPS);"),
    ]
    assert "6 double literals suffixed f and 2 double constants cast to float" in candidate.description
    assert candidate.assumptions  # the results move by float rounding: said, and verified


def test_a_templated_helper_of_an_extension_kernel() -> None:
    # the LSTM cell's sigmoid<scalar_t>: `1.0 / (1.0 + exp(-z))` runs in double for scalar_t = float
    from cuda_agent.agent.targets import load_targets

    (target,) = load_targets(ROOT / "bench" / "kernels" / "outside" / "lstm_cell_accessors.cu").targets
    (candidate,) = propose_single_precision(target)
    assert ("    return 1.0 / (1.0 + exp(-z));", "    return 1.0f / (1.0f + exp(-z));") in changed_lines(
        target.source, candidate.source
    )
    from cuda_agent.agent.compile_environment import compile_in, environment_for

    result = compile_in(
        environment_for(target.path),
        candidate.source,
        target.name_expression,
        filename=str(target.path),
        arch="sm_90",
    )
    assert result.ok, [d.message for d in result.diagnostics]


def _kernel(
    tmp_path: Path, body: str, args: str = ARGS, parameters: str = "const float* x, float* y"
) -> KernelTarget:
    source = SPEC_1D.format(args=args) + (
        f"__global__ void k({parameters}, int n)\n{{\n    int i = blockIdx.x * blockDim.x + threadIdx.x;\n"
        f"    if (i < n) {body}\n}}\n"
    )
    return target_of(tmp_path, source, "k")


@pytest.mark.parametrize(
    "body",
    [
        "{ double acc = x[i]; y[i] = acc * 0.5; }",  # a double the user declared
        "y[i] = (double)x[i] * 0.5;",  # a cast to double: precision asked for
        "y[i] = x[i] * 2;",  # integers only: nothing is double
        "y[i] = x[i] * 0.5f;",  # already float
    ],
)
def test_left_alone_where_double_is_meant_or_absent(tmp_path: Path, body: str) -> None:
    assert propose_single_precision(_kernel(tmp_path, body)) == []


def test_left_alone_for_double_data(tmp_path: Path) -> None:
    args = ARGS.replace("float32", "float64")
    target = _kernel(tmp_path, "y[i] = x[i] * 0.5;", args, "const double* x, double* y")
    assert propose_single_precision(target) == []


@pytest.mark.gpu
def test_the_float_forms_verify_on_the_gpu(tmp_path: Path) -> None:
    from cuda_agent.agent.engine import Engine, EngineSettings
    from cuda_agent.agent.targets import load_targets

    from tests.test_rewrite_warp_per_output import shown

    lstm = load_targets(ROOT / "bench" / "kernels" / "outside" / "lstm_cell_accessors.cu").targets[0]
    with Engine(EngineSettings(use_cache=False, input_sets=2)) as engine:
        for target in (target_of(tmp_path, GELU, "gelu"), lstm):
            baseline = engine.baseline(target)
            assert baseline.usable, baseline.error
            results = engine.evaluate(baseline, propose_single_precision(target))
            assert results and all(r.verified for r in results), shown(baseline.target, results)
            print(shown(baseline.target, results))


@pytest.mark.parametrize(
    ("kernel", "chain"),
    [
        ("gelu", "vectorize+single-precision"),
        ("lstm_cell_forward_kernel", "rewrite:stride-loop+rewrite:vector-loop+single-precision"),
    ],
)
def test_chained_after_the_vectors_in_the_first_round(tmp_path: Path, kernel: str, chain: str) -> None:
    """Once the loads are vectors the double math is the cost left, and a kernel whose search budget ends
    in the first round (the LSTM cell's, at 12 s) must still try both: the vectorised candidate gets its
    literals made float in the same round, and that kernel compiles."""
    from cuda_agent.agent.optimize import PROPOSERS
    from cuda_agent.agent.search import _first_round
    from cuda_agent.agent.targets import load_targets

    lstm = ROOT / "bench" / "kernels" / "outside" / "lstm_cell_accessors.cu"
    target = target_of(tmp_path, GELU, "gelu") if kernel == "gelu" else load_targets(lstm).targets[0]
    proposers = {name: p for name, p in PROPOSERS.items() if name != "llm"}
    candidates = [c for group in _first_round(target, proposers, []) for c in group]
    (chained,) = [c for c in candidates if c.proposer == chain]
    assert "reinterpret_cast<" in chained.source and "4*>" in chained.source  # the vectors, kept
    assert "1.0f" in chained.source and "1.0 " not in chained.source.split("*/", 1)[1]
    from cuda_agent.agent.compile_environment import compile_in, environment_for

    result = compile_in(
        environment_for(target.path),  # the extension's headers, as the engine finds them
        chained.source,
        target.name_expression,
        filename=str(target.path),
        arch="sm_90",
    )
    assert result.ok, [d.message for d in result.diagnostics]
