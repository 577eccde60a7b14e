"""What an optimization job found, as plain data the server shows: diagnostics, lenses, hover rows,
actions and the `cudaAgent/result` notification all read these, never the engine's own types.

A result belongs to one document version: shown only while the text is exactly what was optimized.
"""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass, replace
from typing import Any


@dataclass(frozen=True)
class MeasuredTime:
    median_ms: float
    p10_ms: float
    p90_ms: float
    runs: int
    bandwidth_gbs: float | None = None
    roofline_fraction: float | None = None


@dataclass(frozen=True)
class CandidateRow:
    """One tried candidate, for "what each candidate tried" in hover and the full result."""

    candidate_id: str
    description: str
    proposer: str
    status: str  # CandidateResult.status: faster, no gain, rejected, ...
    speedup: float | None
    reason: str


@dataclass(frozen=True)
class Rewrite:
    """The best verified, measured-faster candidate: what "Apply" writes into the file."""

    candidate_id: str
    description: str
    proposer: str
    source: str  # the whole rewritten file
    assumptions: tuple[str, ...]
    speedup: float
    original: MeasuredTime
    best: MeasuredTime
    decision: str  # how "faster" was decided, for a person
    flags: tuple[str, ...] = ()
    ratio_ci: tuple[float, float] | None = None  # bootstrap 95% interval of the best/original time ratio
    # compute-sanitizer's verdict in a line: "checked by compute-sanitizer, no findings: memcheck 1.2 s ...",
    # or "not checked by compute-sanitizer: not found"; "" where the check is off (cudaAgent.sanitize)
    sanitizer: str = ""
    # What applying it takes besides the file: a host launch left as written, a flag the build must pass.
    notes: tuple[str, ...] = ()


@dataclass(frozen=True)
class OptimizeResult:
    uri: str
    version: int
    kernel: str
    gpu: str
    input_sets: int
    sizes: int  # problem sizes verified
    explanation: str
    measured_at: str  # ISO 8601, UTC
    original: MeasuredTime | None
    rewrite: Rewrite | None
    candidates: tuple[CandidateRow, ...]
    # The spec's PyTorch oracle at the same size, timed after the search (what the user would otherwise
    # run): eager and torch.compile; None until timed, or where there is no oracle (see torch_note).
    torch_eager: MeasuredTime | None = None
    torch_compile: MeasuredTime | None = None
    torch_note: str = ""
    searching: bool = False  # the best so far, shown while the search goes on; a final result follows
    llm: str = ""  # the LLM proposer's session in a line (turns, tokens, estimated cost, why it stopped)
    # Its whole conversation (agent/llm/transcript.py records), for cudaAgent.showTranscript and the
    # feedback log; not sent in `cudaAgent/result` (it can be long), only counted there.
    transcript: tuple[dict[str, Any], ...] = ()

    @property
    def rewrite_id(self) -> dict[str, Any]:
        """Carried in the diagnostic's and the apply action's `data` (ruff-lsp style): enough to find
        the rewrite again on resolve, and to refuse it for any other text."""
        candidate = self.rewrite.candidate_id if self.rewrite else None
        return {"uri": self.uri, "version": self.version, "kernel": self.kernel, "candidate": candidate}

    def headline(self) -> str:
        """E.g. "saxpy: verified rewrite 1.27× faster (0.083 ms → 0.065 ms, NVIDIA H200, 5 input sets,
        2 sizes)": the numbers a person needs to trust it, in one line."""
        if self.rewrite is None:
            return f"{self.kernel}: no verified faster rewrite ({self.explanation})"
        r = self.rewrite
        return (
            f"{self.kernel}: verified rewrite {r.speedup:.2f}× faster "
            f"({r.original.median_ms:.3f} ms → {r.best.median_ms:.3f} ms, {self.gpu}, "
            f"{self.input_sets} input sets, {self.sizes} sizes)"
        )

    def to_json(self) -> dict[str, Any]:
        """The full result for `cudaAgent/result`: JSON-able (tuples become lists), the transcript only
        counted (`cudaAgent.showTranscript` returns it)."""
        data = dataclasses.asdict(replace(self, transcript=()))
        del data["transcript"]
        data["transcript_turns"] = len(self.transcript)
        return data
