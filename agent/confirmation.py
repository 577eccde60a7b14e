"""Before a rewrite is shown, its verification and measurement in full. A search screens its candidates
on a few of the input sets (EngineSettings.screen_input_sets) and with measurements that stop once the
verdict and the speedup are settled (a few dozen interleaved pairs, sandbox/paired.py); the one chosen is
verified on every input set and timed again for the whole budget (Engine.confirm): the figures the user
sees, and the hundreds of checked launches that catch a kernel changing after many of them. A confirmed
one that fails the rest of the input sets, or is no longer the fastest, gives way to the next, which is
confirmed in turn."""

from __future__ import annotations

from collections.abc import Callable, Iterable
from dataclasses import replace

from cuda_agent.agent.candidates import CandidateResult
from cuda_agent.agent.engine import Baseline, Engine


class Confirmation:
    """Remembers each confirmed result by candidate id, so that choosing again as the search goes on
    times only candidates not confirmed before."""

    def __init__(self, engine: Engine, baseline: Baseline) -> None:
        self.engine = engine
        self.baseline = baseline
        self.confirmed: dict[str, CandidateResult] = {}

    def annotate(self, results: Iterable[CandidateResult]) -> list[CandidateResult]:
        """The results with each confirmed one's full measurement in place of its screening."""
        return [self._with_confirmed(r) for r in results]

    def needed(self, result: CandidateResult) -> bool:
        comparison = result.comparison
        return bool(
            result.faster
            and comparison is not None
            and (comparison.settled_early or self.engine.screened(result))
            and result.candidate.id not in self.confirmed
        )

    def choose(
        self,
        results: Iterable[CandidateResult],
        pick: Callable[[list[CandidateResult]], CandidateResult | None],
    ) -> tuple[list[CandidateResult], CandidateResult | None]:
        """The results annotated, and `pick`'s choice among them (best_of, or the sanitizer gate's) once it
        is a confirmed one: each unconfirmed choice is confirmed and the choice made again."""
        annotated = self.annotate(results)
        while True:
            best = pick(annotated)
            if best is None or not self.needed(best):
                return annotated, best
            confirmed = self.engine.confirm(self.baseline, best)
            self.confirmed[best.candidate.id] = confirmed
            annotated = self.annotate(annotated)

    def _with_confirmed(self, result: CandidateResult) -> CandidateResult:
        confirmed = self.confirmed.get(result.candidate.id)
        if confirmed is None:
            return result
        # the rest of the result (the sanitizer's verdict, say) as it stands now
        return replace(
            result,
            verification=confirmed.verification,
            comparison=confirmed.comparison,
            error=confirmed.error,
        )
