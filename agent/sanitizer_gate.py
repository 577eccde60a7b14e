"""The last check before a rewrite is shown: the best verified, measured-faster candidate under
compute-sanitizer (Engine.sanitize). A finding rejects it and the next best is checked instead; after a few
rejections in one job no more are checked (a kernel whose original has a race passes it on to every rewrite,
and each check costs seconds). The search itself never pays for the sanitizer. Where the tool is not
installed, the best is shown with a report that says so ("not checked by compute-sanitizer: not found").
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import replace

from cuda_agent.agent.candidates import OF_THE_REWRITE, CandidateResult
from cuda_agent.agent.engine import Baseline, Engine
from cuda_agent.agent.search import best_of
from cuda_agent.sandbox.sanitizer import SanitizerReport, SanitizerSettings

MAX_REJECTIONS = 3  # in one job: the best, then the next two at most, if each is rejected


class SanitizerGate:
    """Chooses the best candidate that compute-sanitizer does not reject; remembers every verdict (by
    candidate id), so that choosing again as the search goes on sanitizes only new candidates."""

    def __init__(
        self,
        engine: Engine,
        baseline: Baseline,
        settings: SanitizerSettings | None = None,
        max_rejections: int = MAX_REJECTIONS,
    ) -> None:
        self.engine = engine
        self.baseline = baseline
        self.settings = settings
        self.max_rejections = max_rejections
        self.verdicts: dict[str, SanitizerReport] = {}
        self.gave_up = False  # max_rejections reached with faster candidates left unchecked

    def annotate(self, results: Iterable[CandidateResult]) -> list[CandidateResult]:
        """The results with the verdicts reached so far attached (a rejected one is no longer `faster`)."""
        return [
            replace(r, sanitizer=self.verdicts[r.candidate.id]) if r.candidate.id in self.verdicts else r
            for r in results
        ]

    def best(self, results: Iterable[CandidateResult]) -> CandidateResult | None:
        """The fastest verified candidate the sanitizer passes (or could not check), with its verdict;
        None when there is none, or when `max_rejections` were reached before one passed."""
        annotated = self.annotate(results)
        while True:
            best = best_of(annotated)
            if best is None or best.sanitizer is not None:
                return best
            if len(self.rejected()) >= self.max_rejections:
                self.gave_up = True
                return None
            verdict = self.engine.sanitize(self.baseline, best, self.settings)
            self.verdicts[best.candidate.id] = verdict
            # Beside the candidate's sample in the feedback log: a rejected one is incorrect there too.
            self.engine.recorder.sanitizer(self.baseline, best, verdict, self.engine.gpu)
            annotated = self.annotate(annotated)

    def rejected(self) -> list[SanitizerReport]:
        return [report for report in self.verdicts.values() if report.rejected]

    def explain(self, best: CandidateResult | None) -> str:
        """What the sanitizer decided, to append to an outcome's explanation ("; ...")."""
        parts = []
        if best is not None and best.sanitizer is not None:
            parts.append(best.sanitizer.summary(OF_THE_REWRITE))
        rejected = self.rejected()
        if rejected:
            first = rejected[0].findings[0].describe(OF_THE_REWRITE) if rejected[0].findings else ""
            parts.append(
                f"{len(rejected)} faster rewrite(s) rejected by compute-sanitizer (first: {first})"
                if len(rejected) > 1
                else f"a faster rewrite was rejected by compute-sanitizer ({first})"
            )
        if self.gave_up:
            parts.append(f"no further candidate checked after {self.max_rejections} rejections")
        return "".join(f"; {part}" for part in parts)
