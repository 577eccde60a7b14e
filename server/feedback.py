"""Suggestion feedback from the editor: a "shown" record when a verified rewrite is published, then one
decision about it (accepted, rejected, or superseded by the user's own edit), into agent/feedback's log.

A suggestion counts as accepted when the document's text becomes the verified rewrite, whichever way it
got there (the code action, the lens, a paste): resolving the code action is not enough, since editors
also resolve to preview. Any other edit of the text supersedes it, and so does a better rewrite that the
same search found while the first was shown. Only the first decision about a suggestion counts; a reject
may carry the user's one-click reason (agent/feedback.REJECT_REASONS). Logging never fails a request: errors
are logged.

The engine's samples of every candidate it evaluates go to the same workspace log: each session routes its
workspace's files to its own log in its Backend's candidate log (agent/candidate_log.CandidateLog.route).
"""

from __future__ import annotations

import logging
import uuid
from concurrent.futures import ThreadPoolExecutor
from concurrent.futures import TimeoutError as FlushTimeout
from dataclasses import replace
from pathlib import Path
from typing import Any

from cuda_agent.agent.candidate_log import CandidateLog
from cuda_agent.agent.feedback import (
    CandidateInfo,
    Event,
    FeedbackRecord,
    Measurement,
    Original,
    Timing,
    Verification,
    append_record,
    default_log_path,
    logging_enabled,
    model_of,
    now,
)
from cuda_agent.agent.spec import render_spec
from cuda_agent.agent.targets import KernelTarget
from cuda_agent.server.rewrites import MeasuredTime, OptimizeResult

from cuda_agent.line_endings import in_line_endings_of

logger = logging.getLogger(__name__)


class SuggestionFeedback:
    def __init__(self, candidates: CandidateLog) -> None:
        self.log_path: Path | None = None  # None: logging off
        # The candidate log of the Backend this session's searches run on, shared with its other sessions:
        # this session routes its workspace's samples to its own log there.
        self.candidates = candidates
        self._session = uuid.uuid4().hex
        self._shown: dict[
            tuple[str, str], tuple[int, FeedbackRecord]
        ] = {}  # (uri, kernel) → (version, record)
        # Records are written in order on one thread: a record holds the whole file, and its fsync took
        # up to 300 ms on the event loop, stalling the edit that superseded a suggestion.
        self._writer = ThreadPoolExecutor(max_workers=1, thread_name_prefix="cuda-agent-feedback")

    def configure(self, workspace: Path | None, enabled: bool) -> None:
        """Called on initialize and when settings change: off by the cudaAgent.feedback setting or
        CUDA_AGENT_FEEDBACK=0."""
        self.log_path = None
        if enabled and logging_enabled():
            try:
                self.log_path = default_log_path(workspace)
            except Exception:  # platformdirs missing or no home: no log rather than no server
                logger.exception("no feedback log")
        self.candidates.route(self._session, workspace, self.log_path)

    def close(self) -> None:
        """The session ended: the Backend's other sessions go on, their samples not routed here."""
        self.candidates.unroute(self._session)

    def shown(self, file_text: str, target: KernelTarget, result: OptimizeResult) -> None:
        if result.rewrite is None or self.log_path is None:
            return
        earlier = self._shown.get((result.uri, result.kernel))
        if earlier is not None and earlier[0] == result.version:
            if earlier[1].candidate.source == result.rewrite.source:
                # The search's final result: the same rewrite, shown already. An LLM's session went on
                # after it: the decision record carries the whole conversation.
                transcript = _transcript(result)
                if transcript:
                    candidate = replace(earlier[1].candidate, transcript=transcript)
                    self._shown[(result.uri, result.kernel)] = (
                        earlier[0],
                        replace(earlier[1], candidate=candidate),
                    )
                return
            self.decided(result.uri, result.kernel, "superseded")
        record = _shown_record(file_text, target, result)
        self._shown[(result.uri, result.kernel)] = (result.version, record)
        self._append(record)

    def decided(self, uri: str, kernel: str, event: Event, reason: str | None = None) -> None:
        """The first decision about the kernel's suggestion; `reason`: a reject's, from REJECT_REASONS."""
        shown = self._shown.pop((uri, kernel), None)
        if shown is not None:
            self._append(replace(shown[1], event=event, timestamp=now(), reason=reason))

    def torch_timed(self, uri: str, kernel: str, torch_compile_ms: float | None) -> None:
        """torch.compile's time, measured after the suggestion was shown: its decision record carries it."""
        shown = self._shown.get((uri, kernel))
        if shown is not None and torch_compile_ms is not None:
            version, record = shown
            measurement = replace(record.measurement, torch_compile_ms=torch_compile_ms)
            self._shown[(uri, kernel)] = (version, replace(record, measurement=measurement))

    def text_changed(self, uri: str, version: int, text: str) -> None:
        """A new text of the document decides every suggestion made for older text: accepted when the
        text is now that rewrite, superseded by the user's own edit otherwise."""
        for (shown_uri, kernel), (shown_version, record) in list(self._shown.items()):
            if shown_uri == uri and shown_version != version:
                # As the edit wrote it: a rewrite's new lines take a CRLF file's line ends (actions.py).
                applied = in_line_endings_of(text, record.candidate.source) == text
                self.decided(uri, kernel, "accepted" if applied else "superseded")

    def _append(self, record: FeedbackRecord) -> None:
        if self.log_path is not None:
            self._writer.submit(_write, self.log_path, record)

    def flush(self, timeout_s: float | None = None) -> None:
        """Wait until every record handed over so far is in the log (at most `timeout_s`: the server
        leaving on exit gives it a moment, not as long as a full disk takes)."""
        try:
            self._writer.submit(lambda: None).result(timeout=timeout_s)
        except FlushTimeout:
            logger.warning("the feedback log did not take its last records within %s s", timeout_s)


def _write(path: Path, record: FeedbackRecord) -> None:
    try:
        append_record(path, record)
    except OSError:
        logger.exception("could not write the feedback log %s", path)


def _transcript(result: OptimizeResult) -> tuple[dict[str, Any], ...]:
    """The LLM's conversation, for a rewrite the LLM wrote (never the API key: it is not in there)."""
    rewrite = result.rewrite
    return result.transcript if rewrite is not None and model_of(rewrite.proposer) is not None else ()


def _timing(time: MeasuredTime) -> Timing:
    return Timing(time.median_ms, time.p10_ms, time.p90_ms, time.runs)


def _shown_record(file_text: str, target: KernelTarget, result: OptimizeResult) -> FeedbackRecord:
    rewrite = result.rewrite
    assert rewrite is not None
    return FeedbackRecord(
        event="shown",
        suggestion_id=uuid.uuid4().hex,
        original=Original(
            file_text=file_text,
            kernel=result.kernel,
            spec=render_spec(target.spec) if target.spec is not None else "",
            gpu=result.gpu,
        ),
        candidate=CandidateInfo(
            source=rewrite.source,
            description=rewrite.description,
            proposer=rewrite.proposer,
            model=model_of(rewrite.proposer),
            assumptions=rewrite.assumptions,
            flags=rewrite.flags,
            transcript=_transcript(result),
        ),
        verification=Verification(
            passed=True,  # only verified rewrites are shown
            input_sets=result.input_sets,
            sizes=result.sizes,
            summary=rewrite.decision,
        ),
        measurement=Measurement(
            baseline=_timing(rewrite.original),
            candidate=_timing(rewrite.best),
            speedup=rewrite.speedup,
            ratio_ci=rewrite.ratio_ci,
            faster=True,
            torch_compile_ms=result.torch_compile.median_ms if result.torch_compile else None,
        ),
        timestamp=now(),
    )
