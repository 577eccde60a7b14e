"""A candidate rewrite and what the engine found out about it."""

from __future__ import annotations

import hashlib
from dataclasses import dataclass

from cuda_agent.agent.spec import LaunchSpec
from cuda_agent.sandbox.reports import Comparison, CompileResult, VerificationReport, WorkerError
from cuda_agent.sandbox.sanitizer import SanitizerReport

OF_THE_REWRITE = " of the rewrite"  # what the line number of a compute-sanitizer finding refers to


@dataclass(frozen=True)
class Candidate:
    """A rewrite of one kernel, as a person would accept it into their repository."""

    source: str  # the whole file with the rewrite applied
    block: tuple[int, ...]  # the launch block shape (the spec's grid expressions use it)
    description: str  # one line: "block 128 threads (was 256)"
    proposer: str  # "launch-config", "llm:claude-…", "original"
    flags: tuple[str, ...] = ()
    assumptions: tuple[str, ...] = ()  # what the rewrite adds: "x and y do not alias"
    # What applying it takes besides the file: host launches left as written (and why), a flag the
    # user's own build must pass.
    notes: tuple[str, ...] = ()
    # A hand-written rewrite (`cuda-agent compare`) may rename the kernel, declare its own launch in its
    # own spec, and live in another folder (its #includes resolve there).
    kernel_name: str | None = None
    launch: LaunchSpec | None = None
    include_dir: str | None = None
    # The oldest GPU generation it compiles for, as a compute capability times ten (90: sm_90, for thread
    # block clusters); 0 for any. A search on an older GPU does not propose it.
    min_arch: int = 0

    @property
    def id(self) -> str:
        text = "\0".join(
            [self.source, repr(self.block), repr(self.flags), repr(self.launch), str(self.kernel_name)]
        )
        return hashlib.sha256(text.encode()).hexdigest()[:16]


@dataclass(frozen=True)
class CandidateResult:
    candidate: Candidate
    compile: CompileResult
    verification: VerificationReport | None = None
    comparison: Comparison | None = None
    error: WorkerError | None = None
    cached: bool = False
    # compute-sanitizer's verdict, for a candidate checked before it was shown (agent/sanitizer_gate.py)
    sanitizer: SanitizerReport | None = None

    @property
    def verified(self) -> bool:
        return bool(
            self.compile.ok
            and self.verification
            and self.verification.passed
            and not self.timing_failed
            and not self.sanitizer_rejected
        )

    @property
    def sanitizer_rejected(self) -> bool:
        return self.sanitizer is not None and self.sanitizer.rejected

    @property
    def timing_failed(self) -> bool:
        return bool(self.comparison and self.comparison.timed_output_failures)

    @property
    def faster(self) -> bool:
        return self.verified and bool(self.comparison and self.comparison.faster)

    @property
    def speedup(self) -> float | None:
        return self.comparison.speedup if self.comparison else None

    @property
    def status(self) -> str:
        """One word for tables: compile error, rejected, timeout, faster, slower, same."""
        if not self.compile.ok:
            return "compile error"
        if self.error:
            return self.error.kind.replace("_", " ")
        if self.verification and not self.verification.passed:
            return "rejected"
        if self.timing_failed or self.sanitizer_rejected:
            return "rejected"
        if self.comparison is None:
            return "verified"
        if self.comparison.faster:
            return "faster"
        return "slower" if self.comparison.slower else "no gain"

    @property
    def reason(self) -> str:
        if not self.compile.ok:
            first = self.compile.errors[0] if self.compile.errors else None
            return (
                f"line {first.line}: {first.message}"
                if first and first.line
                else (first.message if first else "")
            )
        if self.error:
            return self.error.message
        if self.verification and not self.verification.passed:
            return self.verification.reason
        if self.comparison and self.comparison.timed_output_failures:
            return self.comparison.timed_output_failures[0].message
        if self.sanitizer_rejected:
            return self.sanitizer.summary(OF_THE_REWRITE)  # type: ignore[union-attr]
        return ""  # a timed candidate's verdict is its status and interval; the decision text is for the best
