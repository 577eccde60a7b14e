"""The feedback log: every rewrite suggestion shown, and what the user decided, as RL training data.

One JSON object per line in `<workspace>/.cuda-agent/feedback.jsonl` (or the user data dir). Append-only
and crash-safe: each record is one `os.write` of one complete line on an `O_APPEND` descriptor, then
fsync, so a process killed mid-write leaves at most a torn last line, which readers skip and the next
append starts on a fresh line after. Records hold sources, specs and timings, never the environment (an
LLM's API key included); an LLM's candidate also carries its session's turns (prompt, replies, tool results)
for training on trajectories.
"""

from __future__ import annotations

import json
import logging
import os
from dataclasses import asdict, dataclass
from datetime import datetime, timezone
from pathlib import Path
from typing import Any, Literal

logger = logging.getLogger(__name__)

SCHEMA_VERSION = 1
LOG_DIR = ".cuda-agent"
LOG_NAME = "feedback.jsonl"
DISABLE_ENV = "CUDA_AGENT_FEEDBACK"  # "0" turns logging off

Event = Literal["shown", "accepted", "rejected", "superseded"]
EVENTS: tuple[str, ...] = ("shown", "accepted", "rejected", "superseded")


@dataclass(frozen=True)
class Timing:
    median_ms: float
    p10_ms: float
    p90_ms: float
    runs: int


@dataclass(frozen=True)
class Original:
    """The prompt side: what the user wrote and what it was verified and timed against."""

    file_text: str  # the whole file, as optimized
    kernel: str
    spec: str  # render_spec text: the contract the rewrite was verified under
    gpu: str


@dataclass(frozen=True)
class CandidateInfo:
    source: str  # the whole rewritten file
    description: str
    proposer: str
    model: str | None  # the LLM's model when the proposer is one ("llm:<model>")
    assumptions: tuple[str, ...]
    flags: tuple[str, ...]
    # An LLM candidate's session: the fixed prompt, then every reply and tool result, as
    # agent/llm/transcript.py writes them; () for the offline proposers' candidates.
    transcript: tuple[dict[str, Any], ...] = ()


@dataclass(frozen=True)
class Verification:
    passed: bool
    input_sets: int
    sizes: int
    summary: str  # one line for a person: how it was verified, or why it failed


@dataclass(frozen=True)
class Measurement:
    baseline: Timing | None
    candidate: Timing | None
    speedup: float | None
    ratio_ci: tuple[float, float] | None  # bootstrap 95% interval of candidate/baseline time
    faster: bool  # beyond the measured noise, as the engine decided
    torch_compile_ms: float | None = None  # where known: the milestone above "faster than the original"


@dataclass(frozen=True)
class FeedbackRecord:
    event: Event
    suggestion_id: str  # links a "shown" record to the decision records about it
    original: Original
    candidate: CandidateInfo
    verification: Verification
    measurement: Measurement
    timestamp: str  # ISO 8601, UTC
    schema: int = SCHEMA_VERSION

    def to_json(self) -> dict[str, Any]:
        return asdict(self)

    @classmethod
    def from_json(cls, data: dict[str, Any]) -> FeedbackRecord:
        """Raises KeyError/TypeError/ValueError on a record that is not one (the reader skips those)."""
        m = data["measurement"]
        c = data["candidate"]
        if data["event"] not in EVENTS:
            raise ValueError(f"unknown event {data['event']!r}")
        return cls(
            event=data["event"],
            suggestion_id=str(data["suggestion_id"]),
            original=Original(**data["original"]),
            candidate=CandidateInfo(
                **{
                    **c,
                    "assumptions": tuple(c["assumptions"]),
                    "flags": tuple(c["flags"]),
                    "transcript": tuple(c.get("transcript") or ()),
                }
            ),
            verification=Verification(**data["verification"]),
            measurement=Measurement(
                baseline=Timing(**m["baseline"]) if m.get("baseline") else None,
                candidate=Timing(**m["candidate"]) if m.get("candidate") else None,
                speedup=m.get("speedup"),
                ratio_ci=tuple(m["ratio_ci"]) if m.get("ratio_ci") else None,  # type: ignore[arg-type]
                faster=bool(m["faster"]),
                torch_compile_ms=m.get("torch_compile_ms"),
            ),
            timestamp=str(data["timestamp"]),
            schema=int(data.get("schema", SCHEMA_VERSION)),
        )


def now() -> str:
    return datetime.now(timezone.utc).isoformat(timespec="milliseconds")


def model_of(proposer: str) -> str | None:
    return proposer.split(":", 1)[1] if proposer.startswith("llm:") else None


def logging_enabled() -> bool:
    return os.environ.get(DISABLE_ENV, "1").strip().lower() not in ("0", "false", "no", "off")


def default_log_path(workspace: Path | None) -> Path:
    """The workspace's log; without a workspace, the user data dir's (one log for loose files)."""
    if workspace is not None:
        return workspace / LOG_DIR / LOG_NAME
    from platformdirs import user_data_dir

    return Path(user_data_dir("cuda-agent")) / LOG_NAME


def append_record(path: Path, record: FeedbackRecord) -> None:
    """Append one record: one write of one whole line, then fsync, so a crash loses at most this record."""
    line = (json.dumps(record.to_json(), ensure_ascii=False, separators=(",", ":")) + "\n").encode()
    path.parent.mkdir(parents=True, exist_ok=True)
    fd = os.open(path, os.O_WRONLY | os.O_APPEND | os.O_CREAT, 0o600)
    try:
        size = os.fstat(fd).st_size
        if size and _last_byte(path, size) != b"\n":
            # The last writer died mid-line: start on a fresh line, or this record would be glued onto the
            # torn one and lost with it. Part of the same single write, so it cannot tear on its own.
            line = b"\n" + line
        written = os.write(fd, line)
        if written != len(line):  # never split a record over two writes: a second one could interleave
            raise OSError(f"short write to {path}: {written} of {len(line)} bytes")
        os.fsync(fd)
    finally:
        os.close(fd)


def _last_byte(path: Path, size: int) -> bytes:
    with open(path, "rb") as f:
        f.seek(size - 1)
        return f.read(1)


def read_records(path: Path) -> list[FeedbackRecord]:
    """Every complete record, in order; a torn or foreign line is skipped with a warning, not fatal."""
    records = []
    with open(path, "rb") as f:
        for number, raw in enumerate(f, start=1):
            if not raw.strip():
                continue
            try:
                records.append(FeedbackRecord.from_json(json.loads(raw)))
            except (ValueError, KeyError, TypeError) as exc:
                logger.warning("%s:%d: skipped an unreadable record (%s)", path, number, exc)
    return records
