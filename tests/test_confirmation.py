"""A search screens its candidates with measurements that stop once settled; the rewrite it shows is
measured again in full (agent/confirmation.py, Engine.confirm). Run through the real engine and search with
the GPU's answers from a recording (tests/recordings): no GPU."""

from __future__ import annotations

from pathlib import Path

import pytest
from cuda_agent.agent.engine import Engine, EngineSettings
from cuda_agent.agent.optimize import OptimizeOutcome, optimize
from cuda_agent.agent.targets import load_targets
from cuda_agent.sandbox.protocol import TimeRequest, TimingResult
from cuda_agent.sandbox.reports import WorkerError

ROOT = Path(__file__).resolve().parents[1]
RECORDING = ROOT / "tests" / "recordings" / "elementwise_h200.json"  # saxpy: block 256 1.28x faster


@pytest.fixture
def recorded(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    monkeypatch.setenv("CUDA_AGENT_RECORDED_WORKER", str(RECORDING))
    monkeypatch.setenv("CUDA_AGENT_CACHE_DIR", str(tmp_path))


def saxpy_search(settings: EngineSettings) -> tuple[OptimizeOutcome, list[TimeRequest]]:
    (target,) = [
        t for t in load_targets(ROOT / "examples" / "elementwise.cu").targets if t.kernel.name == "saxpy"
    ]
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
