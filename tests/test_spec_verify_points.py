"""The sizes a kernel is verified at when its spec names none: derived from every size that uses no other
size (however it is written), re-derived for the others; a second point that keeps the sizes'
power-of-two factors when the original fails at the first; none when nothing changes. And the baseline's
note when the original kernel itself fails at them (answered on a CPU: NVRTC compiles, a recording and a
scripted verifier stand in for the GPU)."""

from __future__ import annotations

from dataclasses import replace
from pathlib import Path

import pytest
from cuda_agent.agent.spec import KernelSpec, resolve
from cuda_agent.agent.targets import automatic_verify_points, load_targets, problems_for
from cuda_agent.sandbox.protocol import VerifyRequest
from cuda_agent.sandbox.reports import CheckFailure, VerificationReport

from tests.llm_engine import recorded_engine
from tests.test_spec import VECTOR_ARGS, parse_one, vector_file

LAUNCH = '[launch]\nblock = [256]\ngrid = ["ceil_div(n, block.x)"]\n'
KERNEL = "__global__ void scale(const float* x, float* y, int n) { }\n"


def spec_with(sizes: str, args: str = VECTOR_ARGS, rest: str = "") -> KernelSpec:
    return parse_one(vector_file(f"[sizes]\n{sizes}[args]\n{args}{LAUNCH}{rest}", KERNEL))


@pytest.mark.parametrize(
    ("written", "benchmark", "odd", "power_of_two"),
    [
        ("4096", 4096, 1365, 1280),
        ('"1 << 26"', 1 << 26, 22369621, 22369536),  # 256 × 87381: not a multiple of 512 or 1024
        ('"2**20"', 1 << 20, 349525, 349440),
        ('"1_000_000"', 1_000_000, 333333, 333376),  # 64 × 5209: the factor 64 kept
        ('"4096 * 4"', 16384, 5461, 5376),
        ("1_000_003", 1_000_003, 333335, None),  # odd already: the second point would be the first
        ("96", 96, 33, 32),
    ],
)
def test_every_constant_size_gets_a_smaller_odd_point_then_one_keeping_its_power_of_two(
    written: str, benchmark: int, odd: int, power_of_two: int | None
):
    spec = spec_with(f"n = {written}\n")
    assert spec.sizes == {"n": benchmark}
    points = automatic_verify_points(spec)
    assert points[0] == {"n": odd} and odd % 2 == 1 and odd < benchmark
    if power_of_two is None:
        assert len(points) == 1
        return
    assert points[1] == {"n": power_of_two}
    factor = min(benchmark & -benchmark, 256)
    assert power_of_two % factor == 0 and (power_of_two // factor) % 2 == 1 and power_of_two < benchmark
    # The benchmark problem, then the first point: the one the baseline starts with.
    problems, _, automatic = problems_for(spec)
    assert [p.sizes for p in problems] == [{"n": benchmark}, {"n": odd}] and automatic
    problems, _, automatic = problems_for(spec, verify_points=[points[1]])
    assert [p.sizes for p in problems] == [{"n": benchmark}, {"n": power_of_two}] and not automatic


def test_sizes_over_other_sizes_are_re_derived_and_several_constants_all_shrink():
    spec = spec_with('rows = "1 << 12"\ncols = 1024\nn = "rows * cols"\n')
    odd, kept = automatic_verify_points(spec)
    assert odd == {"rows": 1365, "cols": 341, "n": 1365 * 341}
    assert kept == {"rows": 1280, "cols": 256, "n": 1280 * 256}


def test_tiny_sizes_and_zero_stay_and_give_no_point_when_nothing_changes():
    assert automatic_verify_points(spec_with("n = 2\n")) == []
    problems, _, automatic = problems_for(spec_with("n = 2\n"))
    assert len(problems) == 1 and not automatic
    args = VECTOR_ARGS.replace('shape = ["n"] }', 'shape = ["n + pad"] }', 1)
    padded = spec_with("n = 4096\npad = 0\n", args=args)
    assert [point["pad"] for point in automatic_verify_points(padded)] == [0, 0]
    assert automatic_verify_points(spec_with("n = 4096\npad = 2\n", args=args))[0] == {"n": 1365, "pad": 2}


def test_written_verify_sizes_are_used_instead():
    spec = spec_with('n = "1 << 20"\n', rest="[verify]\nsizes = [{ n = 1000 }]\n")
    problems, _, automatic = problems_for(spec)
    assert [p.sizes for p in problems] == [{"n": 1 << 20}, {"n": 1000}] and not automatic


def test_a_point_the_spec_cannot_run_at_is_left_out():
    # The grid divides by (n - 1365) ** 2: fine at the benchmark, a division by zero at the odd point.
    launch = '[launch]\nblock = [256]\ngrid = ["ceil_div(n, (n - 1365) ** 2)"]\n'
    spec = parse_one(vector_file(f"[sizes]\nn = 4096\n[args]\n{VECTOR_ARGS}{launch}", KERNEL))
    assert automatic_verify_points(spec) == [{"n": 1280}]
    resolve(spec, {"n": 1280})


# --- the baseline: what the original kernel does at the automatic points --------------------------------

SAXPY = """\
/* cuda-agent
[sizes]
n = "1 << 24"
[args]
a = { role = "scalar", dtype = "float32", value = 2 }
x = { role = "input", dtype = "float32", shape = ["n"] }
y = { role = "inout", dtype = "float32", shape = ["n"] }
n = { role = "scalar", dtype = "int32", value = "n" }
[launch]
block = [128]
grid = ["ceil_div(n, block.x)"]
[verify]
oracle = { y = "a * x + y" }
*/
__global__ void saxpy(float a, const float* x, float* y, int n)
{
    int i = blockIdx.x * blockDim.x + threadIdx.x;
    if (i < n) y[i] = a * x[i] + y[i];
}
"""
BENCHMARK, ODD, KEPT = "n=16777216", "n=5592405", "n=5592320"


def baseline_failing_at(tmp_path: Path, failing: set[str]) -> tuple[tuple[str, ...], tuple[str, ...]]:
    """(labels of the baseline's problems, its notes) when the original kernel fails the out_of_bounds check
    at the sizes labelled `failing` and passes elsewhere."""
    path = tmp_path / "saxpy.cu"
    path.write_text(SAXPY)
    target = load_targets(path).find("saxpy")
    assert target is not None and target.spec is not None
    with recorded_engine() as engine:
        answer = engine._sandbox_verify

        def scripted(request: VerifyRequest) -> VerificationReport:
            report = answer(request)
            assert isinstance(report, VerificationReport)
            bad = [p.label for p in request.problems if p.label in failing]
            if not bad:
                return report
            failure = CheckFailure("out_of_bounds", "a write past the end", problem=bad[0], seed=0)
            return replace(report, passed=False, failures=(failure,))

        engine._sandbox_verify = scripted  # type: ignore[method-assign]
        baseline = engine.baseline(target)
    return tuple(p.label for p in baseline.problems), baseline.notes


def test_the_baseline_verifies_at_the_first_automatic_point_when_the_original_passes(tmp_path: Path):
    assert baseline_failing_at(tmp_path, set()) == ((BENCHMARK, ODD), ())


def test_the_baseline_keeps_the_second_point_when_the_original_fails_only_at_the_odd_one(tmp_path: Path):
    labels, notes = baseline_failing_at(tmp_path, {ODD})
    assert labels == (BENCHMARK, KEPT)
    assert notes == (
        f"the original kernel fails at the automatic extra size {ODD} (out_of_bounds); kept {KEPT}. "
        "Add [verify] sizes.",
    )


def test_the_baseline_falls_back_to_the_benchmark_when_the_original_fails_at_both(tmp_path: Path):
    labels, notes = baseline_failing_at(tmp_path, {ODD, KEPT})
    assert labels == (BENCHMARK,)
    assert notes == (
        f"the original kernel fails at the automatic extra sizes {ODD} (out_of_bounds) and {KEPT} "
        "(out_of_bounds); verified at the benchmark size only. Add [verify] sizes.",
    )
