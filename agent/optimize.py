"""One optimization job for one kernel: baseline, the search over proposals, the best verified rewrite."""

from __future__ import annotations

import time
from collections import Counter
from collections.abc import Callable
from dataclasses import dataclass, replace

from cuda_agent.agent.analysis.normalise import without_else_return
from cuda_agent.agent.candidates import Candidate, CandidateResult
from cuda_agent.agent.confirmation import Confirmation
from cuda_agent.agent.engine import Baseline, Engine, Progress
from cuda_agent.agent.llm import LLM_PROPOSER
from cuda_agent.agent.llm.loop import LlmSession, run_session
from cuda_agent.agent.llm.providers import make_provider
from cuda_agent.agent.llm.settings import LlmSettings, disabled_reason, settings_from_env
from cuda_agent.agent.proposers.idioms import IDIOM_PROPOSERS
from cuda_agent.agent.proposers.launch_config import propose_launch_configs
from cuda_agent.agent.proposers.rewrites import REWRITE_PROPOSERS
from cuda_agent.agent.proposers.transforms import TRANSFORMS
from cuda_agent.agent.rewrite import with_inferred_spec_kept, write_launch
from cuda_agent.agent.sanitizer_gate import SanitizerGate
from cuda_agent.agent.search import SearchBudget, SearchOutcome, best_of, run_search
from cuda_agent.agent.targets import KernelTarget
from cuda_agent.sandbox.reports import TimingReport


def _launch_written(
    propose: Callable[[KernelTarget], list[Candidate]],
) -> Callable[[KernelTarget], list[Candidate]]:
    """Idiom rewrites bring their own launch; write it into the file's spec, so that applying the
    rewrite gives a file that re-reads with the launch it was verified with. They see the kernel with a
    bounds check's no-op `else { return; }` dropped (agent/analysis/normalise.py)."""

    def proposer(target: KernelTarget) -> list[Candidate]:
        written = []
        for candidate in propose(without_else_return(target)):
            if candidate.launch is not None:
                sites = write_launch(target, candidate.launch, candidate.source)
                candidate = replace(candidate, source=sites.text, notes=sites.notes)
            if target.spec is not None and target.spec.inferred:
                kept = with_inferred_spec_kept(
                    target, candidate.source, candidate.launch or target.spec.launch
                )
                candidate = replace(candidate, source=kept)
            written.append(candidate)
        return written

    return proposer


def for_arch(
    propose: Callable[[KernelTarget], list[Candidate]], arch: str
) -> Callable[[KernelTarget], list[Candidate]]:
    """The proposer without the candidates that need a newer GPU than `arch` ("sm_80", "sm_90a")
    compiles for: each would only fail to compile there."""
    digits = "".join(ch for ch in arch.removeprefix("sm_").removeprefix("compute_") if ch.isdigit())
    generation = int(digits) if digits else 0

    def proposer(target: KernelTarget) -> list[Candidate]:
        return [c for c in propose(target) if c.min_arch <= generation]

    return proposer


# Every offline proposer by name: `propose(target) -> list[Candidate]`, [] where it does not apply. Each
# must also accept a target whose file is an earlier candidate's (the search combines them that way).
# The search takes one candidate of each in turn, in this order: the analysis-driven rewrites and the
# idioms first, since where one applies it is the large gain and the user sees it seconds sooner; launch
# tuning, the smallest step, last.
PROPOSERS: dict[str, Callable[[KernelTarget], list[Candidate]]] = {
    **{name: _launch_written(propose) for name, propose in REWRITE_PROPOSERS.items()},
    **{name: _launch_written(propose) for name, propose in IDIOM_PROPOSERS.items()},
    **TRANSFORMS,
    "launch-config": propose_launch_configs,
}
# Every proposer a user can choose: the offline ones and the LLM loop, which runs after them (opt-in: it
# needs an API key and costs money, so it is never in the default set).
PROPOSER_NAMES: tuple[str, ...] = (*PROPOSERS, LLM_PROPOSER)


@dataclass(frozen=True)
class OptimizeOutcome:
    baseline: Baseline
    results: tuple[CandidateResult, ...]
    best: CandidateResult | None  # verified and faster beyond noise
    explanation: str  # why this is the answer, in a sentence with numbers
    search: SearchOutcome | None = None  # rounds, time, time to the first gain, why it stopped
    llm: LlmSession | None = None  # the LLM proposer's session, when it ran
    notes: tuple[str, ...] = ()  # e.g. why the LLM proposer did not run


def optimize(
    engine: Engine,
    target: KernelTarget,
    proposers: tuple[str, ...] | None = None,
    on_progress: Callable[[Progress], None] | None = None,
    budget: SearchBudget | None = None,
    budget_s: float | None = None,
    on_best: Callable[[OptimizeOutcome], None] | None = None,
    llm: LlmSettings | None = None,
    sanitize: bool = False,
) -> OptimizeOutcome:
    """Search `proposers` (default: all of PROPOSERS, the offline ones) for the fastest verified rewrite of
    `target`, within `budget` (or just `budget_s` seconds of search, the other limits at their defaults).
    With "llm" among them, the LLM loop runs after the offline search, seeded with its best, with `llm`'s
    settings (default: from the environment) and its own budget; its candidates join the same results.

    `on_best` is called during the search each time a new best verified rewrite is found, with the outcome
    so far (the editor shows the first gain seconds before the search ends).

    With `sanitize`, the best is checked under compute-sanitizer before it is chosen (and before each best
    so far is passed to `on_best`); a rejected one gives way to the next best (agent/sanitizer_gate.py)."""
    if budget is None and budget_s is not None:
        budget = SearchBudget(seconds=budget_s)
    baseline = engine.baseline(target)
    if not baseline.usable:
        return OptimizeOutcome(baseline, (), None, explain_unusable(baseline))
    names = proposers or tuple(PROPOSERS)
    chosen = {name: for_arch(PROPOSERS[name], engine.arch) for name in names if name != LLM_PROPOSER}
    progress = Progress(kernel=target.kernel.name)
    gate = SanitizerGate(engine, baseline) if sanitize else None
    confirmation = Confirmation(engine, baseline)

    def choose(results: list[CandidateResult]) -> tuple[list[CandidateResult], CandidateResult | None]:
        """The results with what the checks before showing found (a full measurement, the sanitizer),
        and the best of them that passes both."""
        seen, best = confirmation.choose(results, gate.best if gate is not None else best_of)
        return (gate.annotate(seen) if gate is not None else seen), best

    # The search checks its budget between batches; within one, a candidate is not started past it (a
    # batch of slow candidates overran a 30 s budget by 18 s on the H200).
    deadline = time.monotonic() + (budget or SearchBudget()).seconds

    def evaluate(
        candidates: list[Candidate] | tuple[Candidate, ...], on_result: Callable[[CandidateResult], None]
    ) -> list[CandidateResult]:
        return engine.evaluate(
            baseline,
            candidates,
            on_result=on_result,
            keep_going=lambda: time.monotonic() < deadline,
            screen=True,  # the shown one is verified on every input set before it is (`choose`)
        )

    shown: str | None = None  # the id of the candidate last passed to on_best
    sessions: list[LlmSession] = []  # the LLM's session once it started: a best so far carries its turns

    def report(p: Progress) -> None:
        nonlocal shown
        if on_progress is not None:
            on_progress(p)
        if on_best is None:
            return
        seen, best = choose(p.results)
        if best is not None and best.candidate.id != shown:
            shown = best.candidate.id
            so_far = f"best so far after {len(p.results)} candidates; the search goes on"
            if gate is not None:
                so_far += gate.explain(best)
            live = sessions[-1] if sessions else None
            on_best(OptimizeOutcome(baseline, tuple(seen), best, so_far, llm=live))

    search = run_search(target, chosen, evaluate, budget, progress, report) if chosen else None
    results = list(search.results) if search is not None else []
    session, notes = None, ()
    if LLM_PROPOSER in names:
        settings = llm or settings_from_env()
        reason = disabled_reason(settings)
        if reason is None:
            session = _run_llm(engine, baseline, settings, results, progress, report, sessions)
            results += session.results
        else:
            notes = (f"LLM proposer disabled: {reason}",)
    results, best = choose(results)
    explanation = explain(baseline, results, best, search)
    if session is not None:
        explanation += f"; {session.summary()}"
    explanation += "".join(f"; {note}" for note in notes)
    if gate is not None:
        explanation += gate.explain(best)
    return OptimizeOutcome(baseline, tuple(results), best, explanation, search, session, notes)


def _run_llm(
    engine: Engine,
    baseline: Baseline,
    settings: LlmSettings,
    prior: list[CandidateResult],
    progress: Progress,
    report: Callable[[Progress], None],
    sessions: list[LlmSession],
) -> LlmSession:
    """The LLM loop after the offline search: its turns and candidates reported like the search's."""
    progress.max_turns = settings.budget.turns

    def on_turn(session: LlmSession) -> None:
        if not sessions:
            sessions.append(session)
        progress.turn, progress.cost_usd = session.replies, session.cost_usd
        progress.message = f"LLM turn {session.replies}/{session.max_turns}"
        report(progress)

    def on_result(result: CandidateResult) -> None:
        progress.done += 1
        progress.total = max(progress.total, progress.done)
        progress.results.append(result)
        if result.faster and result.speedup:
            progress.best_speedup = max(progress.best_speedup, result.speedup)
        report(progress)

    try:
        provider = make_provider(settings)
    except Exception as exc:  # a broken SDK install or bad settings: the offline results still count
        return LlmSession(settings.provider, settings.model_name, stop_reason=f"could not start: {exc}")
    session = run_session(engine, baseline, settings, provider, prior, on_result, on_turn)
    engine.recorder.trajectory(baseline, session, engine.gpu)  # its candidates' samples are logged already
    progress.cost_usd = session.cost_usd
    progress.message = f"LLM done: {session.stop_reason}"
    report(progress)
    return session


def _bound(timing: TimingReport) -> str:
    """Where the original stands against the ceiling that binds it, with the figures. Far below it, the
    ceiling is not what holds the kernel back, and the words say so rather than "already at 0%"."""
    fraction = timing.roofline_fraction or 0.0
    if timing.bound == "memory" and timing.bandwidth_gbs and timing.ceiling:
        figures = f"{fraction:.0%} of the measured copy bandwidth "
        figures += f"({timing.bandwidth_gbs:,.0f} of {timing.ceiling:,.0f} GB/s)"
        if fraction < FAR_BELOW:
            return f"memory-bound by its bytes, yet at only {figures}: {ELSEWHERE}"
        return f"memory-bound: the original already runs at {figures}"
    if timing.bound == "compute" and timing.flop_rate_tflops and timing.ceiling:
        figures = f"{fraction:.0%} of the measured peak "
        figures += f"({timing.flop_rate_tflops:.1f} of {timing.ceiling:.1f} TFLOP/s)"
        if fraction < FAR_BELOW:
            return f"compute-bound by its FLOPs, yet at only {figures}: {ELSEWHERE}"
        return f"compute-bound: the original already runs at {figures}"
    written = f"the original already runs at {fraction:.0%} of the measured roofline"
    return written + (f" ({timing.bandwidth_gbs:,.0f} GB/s)" if timing.bandwidth_gbs else "")


FAR_BELOW = 0.5  # below this share of its ceiling, a kernel is held back by something else
ELSEWHERE = (
    "the time goes elsewhere (serial work in one thread, latency, too few threads), "
    "and no candidate here changed that"
)


def explain_unusable(baseline: Baseline) -> str:
    if baseline.kernel is None:
        return "the original kernel does not compile"
    if baseline.error is not None:
        return baseline.error.message
    assert baseline.verification is not None
    return f"the original kernel fails its own checks: {baseline.verification.reason}"


def explain(
    baseline: Baseline,
    results: list[CandidateResult],
    best: CandidateResult | None,
    search: SearchOutcome | None = None,
) -> str:
    verified = sum(r.verified for r in results)
    searched = ""
    if search is not None:
        searched = f"; {len(search.results)} candidates in {search.rounds} round(s), {search.seconds:.1f} s"
        if search.first_improvement_s is not None:
            searched += f", first gain after {search.first_improvement_s:.1f} s"
        if search.stop_reason:
            searched += f"; stopped: {search.stop_reason}"
    if best is not None and best.comparison is not None:
        c = best.comparison
        return (
            f"{best.candidate.description}: {c.speedup:.2f}× faster "
            f"({c.baseline.median_ms:.3f} ms → {c.candidate.median_ms:.3f} ms); {c.decision}{searched}"
        )
    timing = baseline.timing
    where = ""
    if timing is not None and timing.roofline_fraction is not None and timing.roofline_fraction > 1.05:
        # Faster than the spec's byte count allows: it reads less than all of an input (a gather's table).
        where = (
            f"; the original moves fewer bytes than the spec counts ({timing.roofline_fraction:.0%} of the "
            "roofline by that count): write [roofline] bytes for a true roofline"
        )
    elif timing is not None and timing.roofline_fraction is not None:
        where = "; " + _bound(timing)
    lead = "no candidate was faster beyond the measured noise"
    if any(r.sanitizer_rejected for r in results):  # faster ones there were, but none passed the check
        lead = "no faster candidate passed compute-sanitizer"
    none = _none_verified(baseline, results)
    return f"{lead} ({verified} of {len(results)} verified){none}{where}{searched}"


def _none_verified(baseline: Baseline, results: list[CandidateResult]) -> str:
    """Where no compiled rewrite passed, the check most of them failed; with an inferred spec, what that
    often means (a launch that leaves rows unwritten, sizes the kernel does not take): the spec, not the
    rewrites, is the first thing to check."""
    compiled = [r for r in results if r.compile.ok]
    if len(compiled) < 2 or any(r.verified for r in compiled):
        return ""
    check, count = Counter(_failed_check(r) for r in compiled).most_common(1)[0]
    said = f"; none of the {len(compiled)} rewrites that compiled passed its checks ({count} failed {check})"
    if baseline.spec is not None and baseline.spec.inferred:
        said += (
            ": its spec was inferred, and one that does not launch or size the kernel as its program does "
            "fails every rewrite; check it, or write one"
        )
    return said


def _failed_check(result: CandidateResult) -> str:
    if result.error is not None:
        return result.error.kind
    if result.verification is not None and result.verification.failures:
        return result.verification.failures[0].check
    if result.comparison is not None and result.comparison.timed_output_failures:
        return result.comparison.timed_output_failures[0].check
    return result.status
