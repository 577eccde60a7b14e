"""One optimization job for one kernel: baseline, proposals, evaluation, the best verified rewrite."""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass

from cuda_agent.agent.candidates import Candidate, CandidateResult
from cuda_agent.agent.engine import Baseline, Engine, Progress
from cuda_agent.agent.proposers.launch_config import propose_launch_configs
from cuda_agent.agent.targets import KernelTarget

PROPOSERS: dict[str, Callable[[KernelTarget], list[Candidate]]] = {
    "launch-config": propose_launch_configs,
}


@dataclass(frozen=True)
class OptimizeOutcome:
    baseline: Baseline
    results: tuple[CandidateResult, ...]
    best: CandidateResult | None  # verified and faster beyond noise
    explanation: str  # why this is the answer, in a sentence with numbers


def optimize(
    engine: Engine,
    target: KernelTarget,
    proposers: tuple[str, ...] = ("launch-config",),
    on_progress: Callable[[Progress], None] | None = None,
) -> OptimizeOutcome:
    baseline = engine.baseline(target)
    if not baseline.usable:
        return OptimizeOutcome(baseline, (), None, explain_unusable(baseline))
    candidates = [c for name in proposers for c in PROPOSERS[name](target)]
    progress = Progress(kernel=target.kernel.name, total=len(candidates))

    def report(_: CandidateResult) -> None:
        if on_progress is not None:
            on_progress(progress)

    results = engine.evaluate(baseline, candidates, progress, on_result=report)
    faster = [r for r in results if r.faster]
    best = max(faster, key=lambda r: r.speedup or 0.0, default=None)
    return OptimizeOutcome(baseline, tuple(results), best, explain(baseline, results, best))


def explain_unusable(baseline: Baseline) -> str:
    if baseline.kernel is None:
        return "the original kernel does not compile"
    if baseline.error is not None:
        return baseline.error.message
    assert baseline.verification is not None
    return f"the original kernel fails its own checks: {baseline.verification.reason}"


def explain(baseline: Baseline, results: list[CandidateResult], best: CandidateResult | None) -> str:
    verified = sum(r.verified for r in results)
    if best is not None and best.comparison is not None:
        c = best.comparison
        return (
            f"{best.candidate.description}: {c.speedup:.2f}× faster "
            f"({c.baseline.median_ms:.3f} ms → {c.candidate.median_ms:.3f} ms); {c.decision}"
        )
    timing = baseline.timing
    where = ""
    if timing is not None and timing.roofline_fraction is not None:
        where = f"; the original already runs at {timing.roofline_fraction:.0%} of the measured roofline"
        if timing.bandwidth_gbs:
            where += f" ({timing.bandwidth_gbs:,.0f} GB/s)"
    return f"no candidate was faster beyond the measured noise ({verified} of {len(results)} verified){where}"
