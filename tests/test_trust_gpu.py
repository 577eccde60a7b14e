"""Trust on every dtype and every spec, on a real GPU, through the engine as the CLI and the server use it:
the specs and kernels in tests/kernels/trust/, written the way people write them. Each case was seen to
go wrong before (a cheat passed, or an honest kernel was rejected); the comment says how.

    python -m pytest -m gpu tests/test_trust_gpu.py -s     # figures also go to $OUT/figures.txt
"""

from __future__ import annotations

import os
import time
from collections.abc import Iterator
from pathlib import Path

import pytest
from cuda_agent.agent.candidates import Candidate, CandidateResult
from cuda_agent.agent.engine import Baseline, Engine, EngineSettings
from cuda_agent.agent.targets import KernelTarget, load_targets
from cuda_agent.sandbox.reports import WorkerError

TRUST = Path(__file__).parent / "kernels" / "trust"
pytestmark = pytest.mark.gpu


def record(line: str) -> None:
    print(line)
    if os.environ.get("OUT"):
        with open(Path(os.environ["OUT"]) / "figures.txt", "a") as out:
            out.write(line + "\n")


def fresh_engine() -> Engine:
    return Engine(EngineSettings(timeout_s=5.0, use_cache=False))


@pytest.fixture(scope="module")
def engine() -> Iterator[Engine]:
    with fresh_engine() as shared:
        yield shared


def target(name: str) -> KernelTarget:
    files = load_targets(TRUST / name)
    assert not files.spec_errors, [e.message for e in files.spec_errors]
    (only,) = files.targets
    assert only.spec is not None, only.note
    return only


def baseline_of(engine: Engine, name: str) -> Baseline:
    baseline = engine.baseline(target(name))
    report = baseline.verification
    if report is not None and report.passed:
        oracle = report.notes[0].split(";")[0]
        record(f"{name:28s} original: verified at {', '.join(report.problems)}; {oracle}")
    else:
        record(f"{name:28s} original: REJECTED {baseline.error or (report.reason if report else '')}")
    return baseline


def candidate_from(baseline: Baseline, name: str) -> Candidate:
    """As `cuda-agent compare ORIGINAL NEW` builds it: the new file's kernel, its own launch if it has a
    written spec, else the original's."""
    files = load_targets(TRUST / name)
    new = files.find(baseline.target.kernel.name)
    assert new is not None
    own = new.spec.launch if new.spec is not None and not new.spec.inferred else None
    return Candidate(
        source=files.source,
        block=own.block if own else baseline.spec.launch.block,
        description=name,
        proposer="hand-written",
        kernel_name=new.name_expression,
        launch=own,
        include_dir=str(TRUST),
    )


def evaluate(engine: Engine, baseline: Baseline, name: str) -> CandidateResult:
    (result,) = engine.evaluate(baseline, [candidate_from(baseline, name)])
    report = result.verification
    failure = report.failures[0] if report and report.failures else None
    timed = result.comparison.timed_output_failures if result.comparison else ()
    verdict = (
        f"{failure.check}: {failure.message[:110]}" if failure
        else f"timed_mismatch: {timed[0].message[:110]}" if timed
        else f"error {result.error.kind}: {result.error.message[:110]}" if result.error
        else f"passed, {result.status} {result.speedup or 0:.2f}×"
    )  # fmt: skip
    record(f"{name:28s} candidate: {verdict}")
    return result


def rejected_for(result: CandidateResult) -> str:
    assert result.verification is not None, result.error
    assert not result.verification.passed, "a cheat passed verification"
    return result.verification.failures[0].check


# -- sizes written as expressions ------------------------------------------------------------------------


def test_a_size_written_as_an_expression_gets_its_smaller_odd_size(engine: Engine) -> None:
    """`n = "1 << 26"` was verified at one size only, and these two cheats passed (one timed 1.58× faster)."""
    baseline = baseline_of(engine, "scale_expr.cu")
    assert baseline.usable and len(baseline.problems) == 2, baseline.problems
    assert baseline.problems[1].sizes["n"] % 2 == 1 and baseline.problems[1].sizes["n"] < 1 << 26
    assert rejected_for(evaluate(engine, baseline, "scale_expr_hardcoded.cu")) == "out_of_bounds"
    assert rejected_for(evaluate(engine, baseline, "scale_expr_tail.cu")) == "unwritten"


# -- outputs that hit the poison pattern by chance --------------------------------------------------------


@pytest.mark.parametrize(("original", "candidate"), [
    ("swish_f16.cu", "swish_f16_halfmath.cu"),
    ("brighten_u8.cu", None),
])  # fmt: skip
def test_honest_half_and_byte_kernels_pass_their_timed_runs(
    engine: Engine, original: str, candidate: str | None
) -> None:
    """2^27 fp16 or uint8 outputs equal a fixed poison pattern thousands of times: an honest fp16 kernel's
    own timed runs were rejected as "left 127 output elements unwritten"."""
    baseline = baseline_of(engine, original)
    assert baseline.usable and baseline.timing is not None, baseline.verification
    if candidate is not None:
        result = evaluate(engine, baseline, candidate)
        assert result.verified and result.comparison is not None
        assert not result.comparison.timed_output_failures, result.comparison.timed_output_failures


# -- the oracle ----------------------------------------------------------------------------------------------


def test_an_fp32_convolution_oracle_runs_in_full_precision(engine: Engine) -> None:
    """cuDNN ran the fp32 F.conv2d oracle in TF32: the honest fp32 kernel missed fp32 tolerances (max error
    0.035) and could not serve as the reference, so a TF32-rounding cheat could not even be judged."""
    baseline = baseline_of(engine, "conv2d_fp32.cu")
    assert baseline.usable, baseline.verification
    assert any("full precision" in note for note in baseline.verification.notes)  # type: ignore[union-attr]
    assert rejected_for(evaluate(engine, baseline, "conv2d_tf32_cheat.cu")) == "mismatch"


def test_a_masking_oracle_passes_the_first_time_in_a_fresh_worker() -> None:
    """masked_fill(..., -math.inf) raised KeyError('__import__') in a fresh worker's first evaluation."""
    with fresh_engine() as engine:
        baseline = baseline_of(engine, "causal_scores.cu")
        assert baseline.usable, baseline.error or baseline.verification


def test_an_output_left_out_of_the_oracle_is_checked_against_the_original(engine: Engine) -> None:
    """bias (updated in place) had no expression: "no oracle for bias". Now it is the original's, and a
    rewrite that skips the update is caught on bias."""
    baseline = baseline_of(engine, "bias_relu_update.cu")
    assert baseline.usable, baseline.error or baseline.verification
    assert baseline.oracle == "PyTorch expression for y, original kernel for bias"
    result = evaluate(engine, baseline, "bias_relu_noupdate.cu")
    assert rejected_for(result) == "mismatch"
    assert result.verification.failures[0].argument == "bias"  # type: ignore[union-attr]


def test_arguments_named_in_and_f_are_usable_in_the_oracle(engine: Engine) -> None:
    baseline = baseline_of(engine, "conv1d_filter_F.cu")
    assert baseline.usable, baseline.error or baseline.verification


# -- a hang ----------------------------------------------------------------------------------------------


def test_a_hung_candidate_is_a_timeout_within_the_timeout_and_the_next_finds_a_worker(engine: Engine) -> None:
    """It took 35.7 s: the oracle's 30 s allowance of silence was still running when the kernel hung."""
    baseline = baseline_of(engine, "scale_expr.cu")
    started = time.perf_counter()
    hung = evaluate(engine, baseline, "affine_hang.cu")
    to_verdict = time.perf_counter() - started
    assert isinstance(hung.error, WorkerError) and hung.error.kind == "timeout", hung.error
    started = time.perf_counter()
    engine.executor.device_info(measure_ceilings=False)  # answered by the worker that took over
    restart = time.perf_counter() - started
    after = evaluate(engine, baseline, "scale_expr.cu")  # its oracle needs torch: loaded in standby
    next_verdict = time.perf_counter() - started
    record(
        f"{'hung candidate':28s} verdict 'timeout' {to_verdict:.1f} s after it started (timeout 5 s); "
        f"a worker answered {restart:.2f} s later; the next candidate verified and timed "
        f"{next_verdict:.1f} s after the verdict"
    )
    assert to_verdict < engine.settings.timeout_s + 3.0
    assert restart < 3.0
    assert after.verified


# -- persisting L2 -----------------------------------------------------------------------------------------


@pytest.mark.parametrize("n", [1 << 20, 1 << 21])
def test_loads_marked_evict_last_gain_nothing_where_the_inputs_fit_the_set_aside(sandbox, n: int) -> None:  # type: ignore[no-untyped-def]
    """With the driver's default persisting set-aside (11.25 MiB on the H200), a scale_add whose loads carry
    an L2::evict_last policy kept its inputs through the flush and was timed 1.28× faster at n = 2^20."""
    from cuda_agent.sandbox.compile import compile_kernel
    from cuda_agent.sandbox.plan import ArgumentPlan, Distribution, KernelUnderTest, LaunchPlan, Problem
    from cuda_agent.sandbox.protocol import TimeRequest, TimingResult

    kernels = Path(__file__).parent / "kernels"
    honest = compile_kernel((kernels / "original_scale_add.cu").read_text(), "scale_add", arch="sm_90")
    cheat = compile_kernel(
        (kernels / "adversarial" / "persisting_l2_evict_last.cu").read_text(), "scale_add", arch="sm_90"
    )
    assert honest.kernel is not None and cheat.kernel is not None
    arguments = (
        ArgumentPlan("x", "input", "float32", (n,)),
        ArgumentPlan("y", "input", "float32", (n,)),
        ArgumentPlan("out", "output", "float32", (n,)),
        ArgumentPlan("n", "scalar", "int32", (), Distribution("value", value=n)),
    )
    problem = Problem(f"n={n}", {"n": n}, arguments, {})
    launch = LaunchPlan((-(-n // 256), 1, 1), (256, 1, 1))
    pair = (
        KernelUnderTest(honest.kernel, (launch,), "honest"),
        KernelUnderTest(cheat.kernel, (launch,), "cheat"),
    )
    timed = sandbox.time(TimeRequest(pair, problem, budget_s=0.3))
    assert isinstance(timed, TimingResult) and timed.comparison is not None, timed
    speedup = timed.comparison.speedup
    record(f"{'evict_last loads, n=' + str(n):28s} speedup {speedup:.3f} over the honest kernel")
    assert not timed.comparison.faster, timed.comparison.decision
