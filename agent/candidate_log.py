"""Every candidate the engine evaluates, as one labelled sample in the feedback log (agent/feedback.py).

The engine calls its `CandidateLog` after each candidate's evaluation and after each PyTorch timing, so
every entry point (the CLI's optimize, compare and bench, repository mode, the language server) logs the
same samples; an entry point only says where the log is. A sample holds the prompt side (the original
file, kernel, spec, its oracle and own timing), the candidate (source, block, launch, flags, proposer), the
compile result with its diagnostics on lines, the verification report (which check failed, on which
output, at which size and index), the timings with their interval and the speedup, the GPU and the
toolchain. Rewards are not stored: the export computes them, with the PyTorch times that may come later
(`torch` records) and the LLM sessions' turns (`trajectory` records, one per session).

A candidate counts once: a sample's `key` hashes the kernel, its file and spec, the GPU, and the
candidate's source, block, launch and flags; this process writes a key once (a cached result evaluated
again is not a new sample) and the export keeps the first of each key across processes.

A language server's Backend hands its engine a log of its own (server/backend.py), shared by the sessions
that Backend serves: each session routes the files of its workspace to that workspace's log, as its feedback
settings say (server/feedback.py), so two servers in one process, or two editors on two workspaces of one TCP
server, never write each other's logs. The process's log is only for engines made without one.
"""

from __future__ import annotations

import functools
import hashlib
import importlib.metadata
import json
import logging
import threading
import uuid
from collections import OrderedDict
from collections.abc import Callable
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any

from cuda_agent.agent.candidates import OF_THE_REWRITE, Candidate, CandidateResult
from cuda_agent.agent.feedback import (
    FeedbackLog,
    default_log_path,
    find_workspace,
    logging_enabled,
    model_of,
    now,
)
from cuda_agent.agent.spec import render_spec
from cuda_agent.sandbox.protocol import TorchTimingResult
from cuda_agent.sandbox.reports import DeviceInfo, TimingReport, VerificationReport
from cuda_agent.sandbox.sanitizer import SanitizerReport

from cuda_agent import __version__

if TYPE_CHECKING:
    from cuda_agent.agent.engine import Baseline
    from cuda_agent.agent.llm.loop import LlmSession

logger = logging.getLogger(__name__)

SAMPLE_SCHEMA = 1
# The records' `kind`; a `sanitizer` record is compute-sanitizer's verdict on a sample's candidate, written
# after it (the gate checks only the best candidates, once the search has timed them).
CANDIDATE, TORCH, TRAJECTORY, SANITIZER = "candidate", "torch", "trajectory", "sanitizer"
# A `verification` record: a candidate a search verified on a few input sets (its sample says so), failing
# the rest when it was about to be shown (Engine.confirm); its sample is incorrect in the export.
VERIFICATION = "verification"
SEEN_KEYS = 100_000  # keys remembered by a long-running process, to write each sample once
# A file past this is no prompt a model trains on, and its samples (the file twice each) would fill the log
# with tens of MB a search: they are not logged.
MAX_FILE_BYTES = 512 * 1024


def prompt_key(file_text: str, kernel: str, spec: str, gpu: str) -> str:
    """What a sample's prompt is: the same for every candidate of one kernel's file on one GPU model (the
    editor's suggestion records give the same key: agent/feedback_export.py pairs them)."""
    return _digest([file_text, kernel, spec, gpu])


def sample_key(prompt: str, candidate: Candidate) -> str:
    return _digest([prompt, candidate.source, list(candidate.block), repr(candidate.launch),
                    list(candidate.flags), candidate.kernel_name])  # fmt: skip


def _digest(parts: list[Any]) -> str:
    return hashlib.sha256(json.dumps(parts, ensure_ascii=False).encode()).hexdigest()[:32]


@dataclass(frozen=True)
class _Route:
    workspace: Path | None  # None: a session on loose files
    log: FeedbackLog | None  # None: that session's logging is off


class CandidateLog:
    """Where an engine's samples go: a feedback log, or nowhere (`path` None); or, for an engine that serves
    several editor sessions, the log of the session whose workspace holds the kernel's file (`route`).
    Thread-safe."""

    def __init__(self, path: Path | None = None) -> None:
        self._log: FeedbackLog | None = None
        self._seen: OrderedDict[str, None] = OrderedDict()
        self._lock = threading.Lock()
        # Replaced whole, never changed in place: the engine's threads read it without the lock.
        self._routes: dict[str, _Route] = {}
        self.use(path)

    @staticmethod
    def for_folder(folder: Path) -> CandidateLog:
        """The log of a command run in `folder`: its workspace's (agent/feedback.find_workspace), else
        $CUDA_AGENT_FEEDBACK_LOG or the user data dir's; none with CUDA_AGENT_FEEDBACK=0."""
        return CandidateLog(default_log_path(find_workspace(folder)) if logging_enabled() else None)

    def use(self, path: Path | None) -> None:
        """Every sample to `path` (None: nowhere), unless routed elsewhere."""
        self._log = FeedbackLog(path) if path is not None else None

    @property
    def path(self) -> Path | None:
        return self._log.path if self._log is not None else None

    def route(self, owner: str, workspace: Path | None, path: Path | None) -> None:
        """One editor session's log (`owner` names the session): the samples of files inside `workspace` go
        to `path` (None: not logged, the session's logging is off). A file in several sessions' workspaces
        goes to the innermost one's, the latest session's on a tie; a file in none, to the latest loose-file
        session's log, else the latest session's (the only one, for a server over stdio)."""
        routes = {k: v for k, v in self._routes.items() if k != owner}  # re-routed: now the latest
        routes[owner] = _Route(workspace, FeedbackLog(path) if path is not None else None)
        self._routes = routes

    def unroute(self, owner: str) -> None:
        """The session ended: its workspace's files are no longer routed for it."""
        self._routes = {k: v for k, v in self._routes.items() if k != owner}

    def _destination(self, file: Path) -> FeedbackLog | None:
        routes = list(self._routes.values())
        if not routes:
            return self._log
        holding = [r for r in routes if r.workspace is not None and file.is_relative_to(r.workspace)]
        if holding:
            # max() keeps the first of equals: reversed, that is the latest session's.
            return max(reversed(holding), key=lambda r: len(r.workspace.parts)).log  # type: ignore[union-attr]
        loose = [r for r in routes if r.workspace is None]
        return (loose or routes)[-1].log

    # -- what the engine calls -------------------------------------------------------------------------

    def candidate(
        self, baseline: Baseline, result: CandidateResult, device: DeviceInfo | None, arch: str
    ) -> None:
        """One evaluated candidate. Never raises: a log that cannot be written fails no search."""
        log = self._destination(baseline.target.path)
        if log is None or device is None:  # no GPU: nothing was measured
            return
        if result.error is not None and result.error.kind == "no_gpu":  # says nothing of the candidate
            return
        if len(baseline.target.source) > MAX_FILE_BYTES:
            return
        try:
            prompt, original = _original(baseline, device)
            key = sample_key(prompt, result.candidate)
            if self._first(log, key):
                log.append(_sample(key, prompt, original, result, device, arch))
        except Exception:
            logger.exception("could not log the candidate %s", result.candidate.description)

    def torch(self, baseline: Baseline, timed: TorchTimingResult, device: DeviceInfo | None) -> None:
        """The spec's PyTorch oracle timed eager and with torch.compile: the milestones of the reward."""
        log = self._destination(baseline.target.path)
        if log is None or device is None or timed.eager is None:
            return
        try:
            prompt, original = _original(baseline, device)
            if not self._first(log, "torch:" + prompt):
                return
            log.append(
                {
                    "kind": TORCH, "schema": SAMPLE_SCHEMA, "prompt_key": prompt,
                    "kernel": original["kernel"], "gpu": device.name,
                    "problem": baseline.problems[0].label if baseline.problems else "",
                    "eager": _timing(timed.eager),
                    "compiled": _timing(timed.compiled) if timed.compiled is not None else None,
                    "note": timed.note, "toolchain": _toolchain(), "timestamp": now(),
                }
            )  # fmt: skip
        except Exception:
            logger.exception("could not log the PyTorch timing of %s", baseline.target.kernel.name)

    def verification(
        self,
        baseline: Baseline,
        result: CandidateResult,
        report: VerificationReport,
        device: DeviceInfo | None,
    ) -> None:
        """A screened candidate's failing verification on every input set: its sample, logged with the
        screening's pass, is incorrect in the export. Never raises."""
        if report.passed:
            return
        failure = report.failures[0] if report.failures else None
        self._verdict(baseline, result, device, VERIFICATION, "verification", lambda: {
            "status": "rejected", "check": failure.check if failure else None, "reason": report.reason,
            "input_sets": report.input_sets, "problems": list(report.problems), "seeds": list(report.seeds),
            "timestamp": now(),
        })  # fmt: skip

    def sanitizer(
        self, baseline: Baseline, result: CandidateResult, report: SanitizerReport, device: DeviceInfo | None
    ) -> None:
        """compute-sanitizer's verdict on a candidate the gate checked (agent/sanitizer_gate.py): its sample,
        logged when it was evaluated, is incorrect in the export when the verdict is a rejection."""
        self._verdict(baseline, result, device, SANITIZER, f"sanitizer:{report.status}", lambda: {
            "status": report.status,
            # The tool whose finding rejected it: the failed check, as a verifier's check is named.
            "check": report.findings[0].tool if report.rejected and report.findings else None,
            "summary": report.summary(OF_THE_REWRITE), "reason": report.reason,
            "findings": [asdict(f) for f in report.findings],
            "runs": [asdict(r) for r in report.runs],
            "seconds": report.seconds, "toolchain": _toolchain(), "timestamp": now(),
        })  # fmt: skip

    def _verdict(
        self,
        baseline: Baseline,
        result: CandidateResult,
        device: DeviceInfo | None,
        kind: str,
        tag: str,
        fields: Callable[[], dict[str, Any]],
    ) -> None:
        """A later verdict on a candidate's sample (by its key), once per `tag`. Never raises: a log that
        cannot be written fails no search."""
        if device is None:  # no GPU: no sample either
            return
        try:
            log = self._destination(baseline.target.path)
            if log is None or len(baseline.target.source) > MAX_FILE_BYTES:
                return
            prompt, original = _original(baseline, device)
            key = sample_key(prompt, result.candidate)
            if not self._first(log, f"{tag}:{key}"):
                return
            log.append({
                "kind": kind, "schema": SAMPLE_SCHEMA, "key": key, "prompt_key": prompt,
                "kernel": original["kernel"], "gpu": device.name,
                "candidate": result.candidate.description, **fields(),
            })  # fmt: skip
        except Exception:
            logger.exception("could not log the %s verdict on %s", kind, result.candidate.description)

    def trajectory(self, baseline: Baseline, session: LlmSession, device: DeviceInfo | None) -> None:
        """An LLM session's whole conversation, with the turn that proposed each of its candidates."""
        log = self._destination(baseline.target.path)
        if log is None or device is None or not session.turns:
            return
        if len(baseline.target.source) > MAX_FILE_BYTES:  # its candidates were not logged either
            return
        from cuda_agent.agent.llm.prompt import COMPILE_AND_TEST  # the LLM package imports the engine

        try:
            prompt, original = _original(baseline, device)
            transcript = list(session.transcript())
            calls = _proposing_turns(transcript, COMPILE_AND_TEST)
            candidates = [
                {"key": sample_key(prompt, result.candidate), "turn": turn}
                for result, turn in zip(session.results, calls, strict=False)
            ]
            log.append(
                {
                    "kind": TRAJECTORY, "schema": SAMPLE_SCHEMA, "session": uuid.uuid4().hex,
                    "prompt_key": prompt, "kernel": original["kernel"], "gpu": device.name,
                    "proposer": session.proposer, "provider": session.provider, "model": session.model,
                    "transcript": transcript, "candidates": candidates, "stop_reason": session.stop_reason,
                    "replies": session.replies, "cost_usd": session.cost_usd, "timestamp": now(),
                }
            )  # fmt: skip
        except Exception:
            logger.exception("could not log the LLM session on %s", baseline.target.kernel.name)

    # -- helpers ---------------------------------------------------------------------------------------

    def _first(self, log: FeedbackLog, key: str) -> bool:
        key = f"{log.path}\0{key}"  # written once to each log
        with self._lock:
            if key in self._seen:
                self._seen.move_to_end(key)
                return False
            self._seen[key] = None
            if len(self._seen) > SEEN_KEYS:
                self._seen.popitem(last=False)
            return True


_PROCESS_LOG = CandidateLog()


def process_log() -> CandidateLog:
    """The log of engines made without one (the benches' and tests'): nowhere until pointed somewhere."""
    return _PROCESS_LOG


def _original(baseline: Baseline, device: DeviceInfo) -> tuple[str, dict[str, Any]]:
    """The prompt's key, and the prompt side of a sample."""
    target = baseline.target
    spec = render_spec(baseline.spec)
    return prompt_key(target.source, target.kernel.name, spec, device.name), {
        "file": target.path.name,  # the name only: a user's folders are not training data
        "file_text": target.source,
        "kernel": target.kernel.name,
        "spec": spec,
        "gpu": device.name,
        "oracle": baseline.oracle,
        "problems": [p.label for p in baseline.problems],
        "timing": _timing(baseline.timing) if baseline.timing is not None else None,
    }


def _sample(
    key: str, prompt: str, original: dict[str, Any], result: CandidateResult, device: DeviceInfo, arch: str
) -> dict[str, Any]:
    candidate, compiled, comparison = result.candidate, result.compile, result.comparison
    return {
        "kind": CANDIDATE,
        "schema": SAMPLE_SCHEMA,
        "key": key,
        "prompt_key": prompt,
        "timestamp": now(),
        "original": original,
        "candidate": {
            "source": candidate.source,
            "description": candidate.description,
            "proposer": candidate.proposer,
            "model": model_of(candidate.proposer),
            "block": list(candidate.block),
            "launch": asdict(candidate.launch) if candidate.launch is not None else None,
            "flags": list(candidate.flags),
            "assumptions": list(candidate.assumptions),
            "notes": list(candidate.notes),
            "kernel_name": candidate.kernel_name,
        },
        "compile": {
            "ok": compiled.ok,
            "backend": compiled.backend,
            "seconds": compiled.seconds,
            "diagnostics": [asdict(d) for d in compiled.diagnostics],
        },
        # Every failure whole: which check, which output, at which size, seed and index, with the values.
        "verification": asdict(result.verification) if result.verification is not None else None,
        "measurement": {
            "baseline": _timing(comparison.baseline),
            "candidate": _timing(comparison.candidate),
            "speedup": comparison.speedup,
            "ratio_ci": list(comparison.ratio_ci),  # 95% interval of candidate/baseline time
            "faster": comparison.faster,
            "slower": comparison.slower,
            "decision": comparison.decision,
            "timed_output_failures": [asdict(f) for f in comparison.timed_output_failures],
        }
        if comparison is not None
        else None,
        "error": {"kind": result.error.kind, "message": result.error.message} if result.error else None,
        "status": result.status,
        "verified": result.verified,
        "reason": result.reason,
        "cached": result.cached,
        "gpu": {
            "name": device.name,
            "compute_capability": list(device.compute_capability),
            "multiprocessors": device.multiprocessors,
            "memory_bytes": device.memory_bytes,
            "driver_version": device.driver_version,  # "recorded" for a test recording's answers
            "runtime_version": device.runtime_version,
        },
        "toolchain": {**_toolchain(), "compiler": compiled.backend, "arch": arch},
    }


def _timing(report: TimingReport) -> dict[str, Any]:
    """The times without every run's (hundreds of floats a sample): median and the p10–p90 interval."""
    return {
        "median_ms": report.median_ms,
        "p10_ms": report.p10_ms,
        "p90_ms": report.p90_ms,
        "runs": report.runs,
        "bandwidth_gbs": report.bandwidth_gbs,
        "flop_rate_tflops": report.flop_rate_tflops,
        "roofline_fraction": report.roofline_fraction,
        "bound": report.bound,
    }


@functools.cache
def _toolchain() -> dict[str, Any]:
    """cuda-agent's, NVRTC's and torch's versions (torch's from its metadata: importing it takes seconds)."""
    try:
        from cuda.bindings import nvrtc

        _, major, minor = nvrtc.nvrtcVersion()
        version: str | None = f"{major}.{minor}"
    except Exception:  # no NVRTC library here: the compile result's backend still says what compiled
        version = None
    try:
        torch: str | None = importlib.metadata.version("torch")
    except importlib.metadata.PackageNotFoundError:
        torch = None
    return {"cuda_agent": __version__, "nvrtc": version, "torch": torch}


def _proposing_turns(transcript: list[dict[str, Any]], tool: str) -> list[int]:
    """For each candidate the session evaluated, in order, the index of the assistant turn whose tool call
    proposed it: each tool turn of `tool` that is not an error answered one evaluated candidate
    (agent/llm/loop.py appends them in that order)."""
    turns = []
    for index, turn in enumerate(transcript):
        if turn.get("role") != "tool" or turn.get("tool_name") != tool or turn.get("is_error"):
            continue
        call = turn.get("tool_call_id")
        proposing = next(
            (
                i
                for i in range(index - 1, -1, -1)
                if transcript[i].get("role") == "assistant"
                and any(c.get("id") == call for c in transcript[i].get("tool_calls") or ())
            ),
            index - 1,
        )
        turns.append(proposing)
    return turns
