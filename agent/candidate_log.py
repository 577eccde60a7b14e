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

The language server's engine is created where no log is passed (server/backend.py): it takes the
process's log, which the server's feedback settings point at the workspace's (server/feedback.py).
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
from dataclasses import asdict
from pathlib import Path
from typing import TYPE_CHECKING, Any

from cuda_agent.agent.candidates import Candidate, CandidateResult
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
from cuda_agent.sandbox.reports import DeviceInfo, TimingReport

from cuda_agent import __version__

if TYPE_CHECKING:
    from cuda_agent.agent.engine import Baseline
    from cuda_agent.agent.llm.loop import LlmSession

logger = logging.getLogger(__name__)

SAMPLE_SCHEMA = 1
CANDIDATE, TORCH, TRAJECTORY = "candidate", "torch", "trajectory"  # the records' `kind`
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


class CandidateLog:
    """Where an engine's samples go: a feedback log, or nowhere (`path` None). Thread-safe."""

    def __init__(self, path: Path | None = None) -> None:
        self._log: FeedbackLog | None = None
        self._seen: OrderedDict[str, None] = OrderedDict()
        self._lock = threading.Lock()
        self.use(path)

    @staticmethod
    def for_folder(folder: Path) -> CandidateLog:
        """The log of a command run in `folder`: its workspace's (agent/feedback.find_workspace), else
        $CUDA_AGENT_FEEDBACK_LOG or the user data dir's; none with CUDA_AGENT_FEEDBACK=0."""
        return CandidateLog(default_log_path(find_workspace(folder)) if logging_enabled() else None)

    def use(self, path: Path | None) -> None:
        if path != self.path:
            with self._lock:
                self._seen.clear()  # another log: none of its samples written yet
        self._log = FeedbackLog(path) if path is not None else None

    @property
    def path(self) -> Path | None:
        return self._log.path if self._log is not None else None

    # -- what the engine calls -------------------------------------------------------------------------

    def candidate(
        self, baseline: Baseline, result: CandidateResult, device: DeviceInfo | None, arch: str
    ) -> None:
        """One evaluated candidate. Never raises: a log that cannot be written fails no search."""
        if self._log is None or device is None:  # no GPU: nothing was measured
            return
        if result.error is not None and result.error.kind == "no_gpu":  # says nothing of the candidate
            return
        if len(baseline.target.source) > MAX_FILE_BYTES:
            return
        try:
            prompt, original = _original(baseline, device)
            key = sample_key(prompt, result.candidate)
            if self._first(key):
                self._append(_sample(key, prompt, original, result, device, arch))
        except Exception:
            logger.exception("could not log the candidate %s", result.candidate.description)

    def torch(self, baseline: Baseline, timed: TorchTimingResult, device: DeviceInfo | None) -> None:
        """The spec's PyTorch oracle timed eager and with torch.compile: the milestones of the reward."""
        if self._log is None or device is None or timed.eager is None:
            return
        try:
            prompt, original = _original(baseline, device)
            if not self._first("torch:" + prompt):
                return
            self._append(
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

    def trajectory(self, baseline: Baseline, session: LlmSession, device: DeviceInfo | None) -> None:
        """An LLM session's whole conversation, with the turn that proposed each of its candidates."""
        if self._log is None or device is None or not session.turns:
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
            self._append(
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

    def _first(self, key: str) -> bool:
        with self._lock:
            if key in self._seen:
                self._seen.move_to_end(key)
                return False
            self._seen[key] = None
            if len(self._seen) > SEEN_KEYS:
                self._seen.popitem(last=False)
            return True

    def _append(self, data: dict[str, Any]) -> None:
        log = self._log
        if log is not None:
            log.append(data)


_PROCESS_LOG = CandidateLog()


def process_log() -> CandidateLog:
    """The log of engines made without one (the language server's): nowhere until pointed somewhere."""
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
