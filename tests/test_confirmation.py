"""A search screens its candidates with measurements that stop once settled; the rewrite it shows is
measured again in full (agent/confirmation.py, Engine.confirm). Run through the real engine and search with
the GPU's answers from a recording (tests/recordings): no GPU."""

from __future__ import annotations

from pathlib import Path

import pytest
from cuda_agent.agent.engine import Engine, EngineSettings
from cuda_agent.agent.optimize import OptimizeOutcome, optimize
from cuda_agent.agent.targets import KernelTarget, load_targets
from cuda_agent.sandbox.protocol import TimeRequest, TimingResult
from cuda_agent.sandbox.reports import WorkerError

ROOT = Path(__file__).resolve().parents[1]
RECORDING = ROOT / "tests" / "recordings" / "elementwise_h200.json"  # saxpy: block 256 1.28x faster


@pytest.fixture
def recorded(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    monkeypatch.setenv("CUDA_AGENT_RECORDED_WORKER", str(RECORDING))
    monkeypatch.setenv("CUDA_AGENT_CACHE_DIR", str(tmp_path))


def saxpy() -> KernelTarget:
    (target,) = [
        t for t in load_targets(ROOT / "examples" / "elementwise.cu").targets if t.kernel.name == "saxpy"
    ]
    return target


def saxpy_search(settings: EngineSettings) -> tuple[OptimizeOutcome, list[TimeRequest]]:
    target = saxpy()
    requests: list[TimeRequest] = []
    with Engine(settings) as engine:
        timed = engine._sandbox_time  # what went to the worker, in order

        def spy(request: TimeRequest) -> TimingResult | WorkerError:
            requests.append(request)
            return timed(request)

        engine._sandbox_time = spy  # type: ignore[method-assign]
        outcome = optimize(engine, target, ("launch-config",), budget_s=60)
    return outcome, requests


def test_the_shown_rewrite_is_measured_in_full_after_a_settled_screening(recorded: None) -> None:
    outcome, requests = saxpy_search(EngineSettings(use_cache=False))
    best = outcome.best
    assert best is not None and best.candidate.block == (256,)
    assert best.comparison is not None and not best.comparison.settled_early
    assert "settled" not in best.comparison.decision and "settled" not in outcome.explanation
    pairs = [r for r in requests if len(r.kernels) == 2]
    screened = [r for r in pairs if r.settle_early]
    full = [r for r in pairs if not r.settle_early]
    # every candidate screened once, and the one shown measured once more in full, last
    assert len(screened) == len(outcome.results) >= 2
    assert len(full) == 1 and pairs[-1] is full[0]
    assert best.speedup == pytest.approx(0.0832 / 0.0653, rel=1e-3)


def test_without_settling_nothing_is_measured_twice(recorded: None) -> None:
    outcome, requests = saxpy_search(EngineSettings(use_cache=False, settle_early=False))
    pairs = [r for r in requests if len(r.kernels) == 2]
    assert len(pairs) == len(outcome.results) and not any(r.settle_early for r in pairs)
    assert outcome.best is not None and outcome.best.candidate.block == (256,)


def spied_verify(engine: Engine, fail_full_once: bool) -> tuple[list[tuple[int, int]], list[int]]:
    """Record each candidate verification (the block's x, its input sets) and, with `fail_full_once`, answer
    the first candidate verification on every input set with a mismatch (a kernel right on the screening's
    sets only); returns the record and the blocks failed so."""
    from cuda_agent.sandbox.reports import CheckFailure, VerificationReport

    seen: list[tuple[int, int]] = []
    failed: list[int] = []
    verify = engine._sandbox_verify

    def spy(request):  # type: ignore[no-untyped-def]
        if request.candidate.label != "candidate":
            return verify(request)
        block = request.candidate.launches[0].block[0]
        seen.append((block, request.input_sets))
        if fail_full_once and not failed and request.input_sets == engine.settings.input_sets:
            failed.append(block)
            mismatch = CheckFailure("mismatch", "y: 3 of 1000000 elements differ", argument="y", seed=4)
            return VerificationReport(False, (mismatch,), ("n=1000000",), (0, 1, 2, 3, 4), 5, ("mismatch",))
        return verify(request)

    engine._sandbox_verify = spy  # type: ignore[method-assign]
    return seen, failed


def test_a_search_verifies_on_a_few_input_sets_and_the_shown_rewrite_on_all(recorded: None) -> None:
    target = saxpy()
    with Engine(EngineSettings(use_cache=False)) as engine:
        seen, _ = spied_verify(engine, fail_full_once=False)
        outcome = optimize(engine, target, ("launch-config",), budget_s=60)
    best = outcome.best
    assert best is not None and best.verification is not None
    assert best.verification.input_sets == 5  # what the editor's "verified on 5 input sets" says
    screened = [sets for _, sets in seen[: len(outcome.results)]]
    assert screened == [2] * len(outcome.results)
    assert seen[len(outcome.results) :] == [(best.candidate.block[0], 5)]  # the shown one, once, in full


def test_a_rewrite_failing_the_other_input_sets_gives_way_to_the_next(recorded: None) -> None:
    target = saxpy()
    with Engine(EngineSettings(use_cache=False)) as engine:
        _, failed = spied_verify(engine, fail_full_once=True)
        outcome = optimize(engine, target, ("launch-config",), budget_s=60)
    assert failed == [256]  # the fastest screened, then failing on all five sets
    (dropped,) = [r for r in outcome.results if r.candidate.block == (256,)]
    assert not dropped.faster and dropped.verification is not None and not dropped.verification.passed
    # the recording's only faster block was 256: nothing is shown, and the failure is counted
    assert outcome.best is None
    assert "no candidate was faster" in outcome.explanation and "3 of 4 verified" in outcome.explanation


@pytest.mark.gpu
def test_on_the_gpu_the_search_screens_and_the_shown_rewrite_is_verified_on_every_set(tmp_path: Path) -> None:
    target = saxpy()
    with Engine(EngineSettings(use_cache=False)) as engine:
        seen, _ = spied_verify(engine, fail_full_once=False)
        outcome = optimize(engine, target, budget_s=20)
    screened = seen[: len(outcome.results)]
    assert screened and all(sets == 2 for _, sets in screened)
    best = outcome.best
    assert best is not None and best.verification is not None, outcome.explanation
    assert best.verification.passed and best.verification.input_sets == 5
    assert len(best.verification.seeds) == 5 * len(best.verification.problems)
    print(outcome.explanation)
