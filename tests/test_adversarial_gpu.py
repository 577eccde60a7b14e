"""The adversarial suite on a real GPU: every trick in tests/kernels/adversarial/ is rejected for the
reason its header names, every legitimate rewrite passes, and the caller survives hangs and crashes.

Each .cu file starts with `// expect: <what>`: a check name (or several, `a|b`), `pass`, `compile` (must
not compile), `timeout` / `cuda_error` (a WorkerError, then a fresh worker serves the next request),
`timed_mismatch` (verification cannot see it; the checked outputs of timed runs must), or `no_gain` (a
correct kernel whose trick targets the timer: it must pass and not be measured faster than the original).
Problems and launch plans are built here by hand: no spec parser involved.
"""

from __future__ import annotations

import os
import re
from dataclasses import replace
from pathlib import Path

import pytest
from cuda_agent.sandbox.client import Sandbox
from cuda_agent.sandbox.compile import compile_kernel
from cuda_agent.sandbox.plan import (
    ArgumentPlan,
    CompiledKernel,
    Distribution,
    KernelUnderTest,
    LaunchPlan,
    Problem,
    Tolerance,
)
from cuda_agent.sandbox.protocol import TimeRequest, TimingResult, VerifyRequest
from cuda_agent.sandbox.reports import VerificationReport, WorkerError

KERNELS = Path(__file__).parent / "kernels"
ADVERSARIAL = sorted((KERNELS / "adversarial").glob("*.cu"))
SCALE_SIZES = (16_777_216, 1_000_003, 257)  # the benchmark size, an odd size, a tiny one
ROW_SHAPES = ((4096, 4096), (37, 1000))
STRIDE_GRID = 132 * 8  # blocks of the grid-stride rewrite: 8 per H200 multiprocessor


def record(line: str) -> None:
    """Figures and verdicts for the closing note: printed, and kept under $OUT on the GPU machine."""
    print(line)
    if os.environ.get("OUT"):
        with open(Path(os.environ["OUT"]) / "figures.txt", "a") as out:
            out.write(line + "\n")


def header(path: Path) -> dict[str, str]:
    return dict(re.findall(r"^// (trick|expect|original|launch|may_alias): (.*)$", path.read_text(), re.M))


def compiled(source: str, name: str) -> CompiledKernel:
    result = compile_kernel(source, name, arch="sm_90")
    assert result.ok and result.kernel is not None, [d.message for d in result.diagnostics]
    return result.kernel


# -- problems and launches, by hand ----------------------------------------------------------------------


def scale_add_problem(
    n: int,
    *,
    may_alias: str | None = None,
    oracle: dict[str, str] | None = None,
    bytes_moved: int | None = None,
) -> Problem:
    arguments = (
        ArgumentPlan("x", "input", "float32", (n,)),
        ArgumentPlan("y", "input", "float32", (n,), Distribution("uniform", low=-2.0, high=2.0)),
        ArgumentPlan("out", "output", "float32", (n,), may_alias=may_alias),
        ArgumentPlan("n", "scalar", "int32", (), Distribution("value", value=n)),
    )
    return Problem(
        f"n={n}", {"n": n}, arguments, {"out": Tolerance.default("float32")}, oracle=oracle,
        bytes_moved=12 * n if bytes_moved is None else bytes_moved, flops=2 * n,
    )  # fmt: skip


def row_sum_problem(rows: int, cols: int) -> Problem:
    arguments = (
        ArgumentPlan("x", "input", "float32", (rows, cols)),
        ArgumentPlan("out", "output", "float32", (rows,)),
        ArgumentPlan("rows", "scalar", "int32", (), Distribution("value", value=rows)),
        ArgumentPlan("cols", "scalar", "int32", (), Distribution("value", value=cols)),
    )
    tolerance = Tolerance.default("float32", reduction_length=cols)
    return Problem(
        f"rows={rows}, cols={cols}", {"rows": rows, "cols": cols}, arguments, {"out": tolerance},
        bytes_moved=4 * rows * (cols + 1), flops=rows * cols,
    )  # fmt: skip


def scale_add_launch(n: int, kind: str = "per_element") -> LaunchPlan:
    blocks = -(-n // 256)
    if kind == "per_4_elements":
        quads = -(-n // 4)
        return LaunchPlan((-(-quads // 256), 1, 1), (256, 1, 1))
    if kind == "grid_stride":
        return LaunchPlan((min(blocks, STRIDE_GRID), 1, 1), (256, 1, 1))
    if kind == "block_2d":
        return LaunchPlan((blocks, 1, 1), (32, 8, 1))
    return LaunchPlan((blocks, 1, 1), (256, 1, 1))


def kernel_under_test(kernel: CompiledKernel, original: str, launch: str, label: str) -> KernelUnderTest:
    if original == "row_sum":
        launches = tuple(LaunchPlan((rows, 1, 1), (256, 1, 1)) for rows, _ in ROW_SHAPES)
    else:
        launches = tuple(scale_add_launch(n, launch) for n in SCALE_SIZES)
    return KernelUnderTest(kernel, launches, label)


def problems_for(original: str, may_alias: str | None = None) -> tuple[Problem, ...]:
    if original == "row_sum":
        return tuple(row_sum_problem(r, c) for r, c in ROW_SHAPES)
    return tuple(scale_add_problem(n, may_alias=may_alias) for n in SCALE_SIZES)


def benchmark_only(kernel: KernelUnderTest) -> KernelUnderTest:
    return replace(kernel, launches=kernel.launches[:1])


_originals: dict[str, KernelUnderTest] = {}


def original(name: str) -> KernelUnderTest:
    if name not in _originals:
        kernel = compiled((KERNELS / f"original_{name}.cu").read_text(), name)
        _originals[name] = kernel_under_test(kernel, name, "per_element", "original")
    return _originals[name]


def timed_comparison(
    sandbox: Sandbox, reference: KernelUnderTest, candidate: KernelUnderTest, problem: Problem
) -> TimingResult:
    first = benchmark_only(reference)
    timed = sandbox.time(TimeRequest((first, benchmark_only(candidate)), problem, first, budget_s=0.2))
    assert isinstance(timed, TimingResult), timed
    return timed


# -- the suite --------------------------------------------------------------------------------------------


@pytest.mark.gpu
@pytest.mark.parametrize("path", ADVERSARIAL, ids=lambda p: p.stem)
def test_adversarial_kernel(path: Path, sandbox: Sandbox) -> None:
    meta = header(path)
    expect, name = meta["expect"], meta["original"]
    result = compile_kernel(path.read_text(), name, arch="sm_90")
    if expect == "compile":
        assert not result.ok
        record(f"{path.stem:30s} expect {expect:26s} -> rejected: compile ({result.errors[0].message[:70]})")
        return
    assert result.ok and result.kernel is not None, [d.message for d in result.diagnostics]
    alias = meta.get("may_alias", "").partition("=")[2] or None
    problems = problems_for(name, may_alias=alias)
    reference = original(name)
    candidate = kernel_under_test(result.kernel, name, meta.get("launch", "per_element"), path.stem)
    report = sandbox.verify(VerifyRequest(candidate, problems, reference, input_sets=5))

    if expect in ("timeout", "cuda_error"):
        assert isinstance(report, WorkerError), report
        record(f"{path.stem:30s} expect {expect:26s} -> WorkerError {report.kind}: {report.message[:160]}")
        assert report.kind == expect and report.restarted
        if expect == "timeout":
            # Where it stopped, from the last heartbeat.
            timed_out = f"timed out after {sandbox.timeout_s:.1f} s (kernel did not finish"
            assert report.message.startswith(timed_out) and "last word from the worker: " in report.message
        # The caller survives: a fresh worker serves the next request.
        again = sandbox.verify(VerifyRequest(reference, problems, reference, input_sets=1))
        assert isinstance(again, VerificationReport) and again.passed, again
        return

    assert isinstance(report, VerificationReport), report
    verdict = report.failures[0] if report.failures else None
    shown = f"{verdict.check}: {verdict.message[:90]}" if verdict else f"passed in {report.seconds:.2f} s"
    record(f"{path.stem:30s} expect {expect:26s} -> {shown}")
    if expect in ("pass", "timed_mismatch", "no_gain"):
        # A launch counter stays under its threshold during verification's 30 launches: only the checked
        # outputs of the timed runs can see it.
        assert report.passed, report.failures
        timed = timed_comparison(sandbox, reference, candidate, problems[0])
        caught = [f for f in timed.failures if f.kernel == candidate.label]
        if expect in ("pass", "no_gain"):
            assert not timed.failures, timed.failures
            assert timed.comparison is not None
            comparison = timed.comparison
            record(f"{'':30s} timed: speedup {comparison.speedup:.3f} ({comparison.decision[-40:]})")
            if expect == "no_gain":
                assert not comparison.faster and comparison.speedup < 1.03, comparison.decision
        else:
            shown = f"{caught[0].check}: {caught[0].message[:90]}" if caught else "NOT CAUGHT"
            record(f"{'':30s} timed -> {shown}")
            assert caught and caught[0].check == "timed_mismatch", timed.failures
        return
    assert not report.passed
    assert verdict is not None and verdict.check in expect.split("|"), verdict
    assert verdict.seed is not None and verdict.problem is not None  # replayable


@pytest.mark.gpu
def test_rejection_is_replayable_from_its_seed(sandbox: Sandbox) -> None:
    """The failing input set's seed, given back as base_seed, reproduces the same failure."""
    path = KERNELS / "adversarial" / "lower_precision.cu"
    odd = slice(1, 2)  # the odd size alone
    lowp = kernel_under_test(compiled(path.read_text(), "scale_add"), "scale_add", "per_element", "lowp")
    candidate = replace(lowp, launches=lowp.launches[odd])
    reference = replace(original("scale_add"), launches=original("scale_add").launches[odd])
    problems = problems_for("scale_add")[odd]
    first = sandbox.verify(VerifyRequest(candidate, problems, reference, input_sets=5))
    assert isinstance(first, VerificationReport) and not first.passed
    failure = first.failures[0]
    replay = sandbox.verify(VerifyRequest(candidate, problems, reference, 1, base_seed=failure.seed))
    assert isinstance(replay, VerificationReport) and not replay.passed
    again = replay.failures[0]
    assert (again.bad_elements, again.first_bad_index, again.expected) == (
        failure.bad_elements, failure.first_bad_index, failure.expected,
    )  # fmt: skip


@pytest.mark.gpu
def test_bad_launch_configuration_is_a_launch_failure_and_the_worker_stays(sandbox: Sandbox) -> None:
    reference = original("scale_add")
    too_big = replace(reference, launches=tuple(LaunchPlan(p.grid, (2048, 1, 1)) for p in reference.launches))
    report = sandbox.verify(VerifyRequest(too_big, problems_for("scale_add"), reference, input_sets=1))
    assert isinstance(report, VerificationReport) and not report.passed
    assert report.failures[0].check == "launch", report.failures
    record(f"{'block 2048 threads':30s} expect {'launch':26s} -> launch: {report.failures[0].message[:80]}")
    again = sandbox.verify(VerifyRequest(reference, problems_for("scale_add"), reference, input_sets=1))
    assert isinstance(again, VerificationReport) and again.passed


@pytest.mark.gpu
def test_pytorch_oracle_float32(sandbox: Sandbox) -> None:
    problems = tuple(scale_add_problem(n, oracle={"out": "3 * x + y"}) for n in SCALE_SIZES)
    good = compiled((KERNELS / "adversarial" / "legit_restrict.cu").read_text(), "scale_add")
    bad = compiled((KERNELS / "adversarial" / "partial_write_first_half.cu").read_text(), "scale_add")
    passed = sandbox.verify(VerifyRequest(kernel_under_test(good, "scale_add", "", "restrict"), problems))
    failed = sandbox.verify(VerifyRequest(kernel_under_test(bad, "scale_add", "", "half"), problems))
    assert isinstance(passed, VerificationReport) and passed.passed, passed
    assert isinstance(failed, VerificationReport) and failed.failures[0].check == "unwritten", failed
    record(f"{'torch oracle 3*x+y':30s} legit passed in {passed.seconds:.2f} s; half-write -> unwritten")


BF16_KERNEL = r"""
// bfloat16 in and out as raw bits: widen, compute in float, round to nearest even.
extern "C" __global__ void halve_add_one(const unsigned short* x, unsigned short* out, int n) {
    int i = blockIdx.x * blockDim.x + threadIdx.x;
    if (i < n) {
        float v = __uint_as_float(((unsigned int)x[i]) << 16) * 0.5f + 1.0f;
        unsigned int b = __float_as_uint(v);
        out[i] = (unsigned short)((b + 0x7FFFu + ((b >> 16) & 1u)) >> 16);
    }
}
"""


@pytest.mark.gpu
def test_pytorch_oracle_bfloat16(sandbox: Sandbox) -> None:
    def problem(n: int) -> Problem:
        arguments = (
            ArgumentPlan("x", "input", "bfloat16", (n,)),
            ArgumentPlan("out", "output", "bfloat16", (n,)),
            ArgumentPlan("n", "scalar", "int32", (), Distribution("value", value=n)),
        )
        return Problem(
            f"n={n}", {"n": n}, arguments, {"out": Tolerance.default("bfloat16")}, {"out": "x * 0.5 + 1.0"}
        )

    sizes = (1 << 20, 999)
    kernel = compiled(BF16_KERNEL, "halve_add_one")
    launches = tuple(LaunchPlan((-(-n // 256), 1, 1), (256, 1, 1)) for n in sizes)
    report = sandbox.verify(
        VerifyRequest(KernelUnderTest(kernel, launches), tuple(problem(n) for n in sizes))
    )
    assert isinstance(report, VerificationReport) and report.passed, report
    record(f"{'bfloat16 torch oracle':30s} passed in {report.seconds:.2f} s")


@pytest.mark.gpu
def test_in_place_safe_kernel_passes_the_aliasing_run(sandbox: Sandbox) -> None:
    problems = problems_for("scale_add", may_alias="x")
    reference = original("scale_add")
    report = sandbox.verify(VerifyRequest(reference, problems, reference, input_sets=2))
    assert isinstance(report, VerificationReport) and report.passed, report
    assert "aliasing" in report.checks_run
