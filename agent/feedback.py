"""The feedback log: every evaluated candidate as a labelled sample (agent/candidate_log.py), every rewrite
suggestion shown in the editor and what the user decided, as RL training data (agent/feedback_export.py).

One JSON object per line in `<workspace>/.cuda-agent/feedback.jsonl` (outside a workspace:
$CUDA_AGENT_FEEDBACK_LOG, else the user data dir's). Append-only and crash-safe with many writers (the CLI,
the bench and language servers write one workspace's log at once): a writer holds an exclusive lock on
`feedback.jsonl.lock` (flock, released by the kernel when its holder dies, kill -9 included) while it
appends one whole line and fsyncs it, so a writer killed mid-write leaves at most a torn last line, which
the next writer starts after and readers skip. Past a size cap the file is rotated to `feedback.N.jsonl`
(N rising: the lowest is the oldest), and the oldest files beyond a count are deleted. Records hold
sources, specs and timings, never the environment (an LLM's API key included); an LLM's candidate also
carries its session's turns (prompt, replies, tool results) for training on trajectories.
"""

from __future__ import annotations

import contextlib
import fcntl  # POSIX, as the sandbox's process groups are: the log's writers lock it
import json
import logging
import os
import re
from collections.abc import Iterator
from dataclasses import asdict, dataclass
from datetime import datetime, timezone
from pathlib import Path
from typing import Any, Literal

logger = logging.getLogger(__name__)

SCHEMA_VERSION = 1
LOG_DIR = ".cuda-agent"
LOG_NAME = "feedback.jsonl"
DISABLE_ENV = "CUDA_AGENT_FEEDBACK"  # "0" turns logging off
LOG_ENV = "CUDA_AGENT_FEEDBACK_LOG"  # a path: the log outside any workspace, not the user data dir's
# Rotation: 64 MiB a file, the current one and 15 rotated, about 1 GiB in all.
MAX_FILE_BYTES = 64 * 2**20
MAX_FILES = 16

Event = Literal["shown", "accepted", "rejected", "superseded"]
EVENTS: tuple[str, ...] = ("shown", "accepted", "rejected", "superseded")
# Why a user rejected a suggestion, as the editors offer it in one click (a fixed vocabulary, so that the
# exported pairs can be filtered or weighted by it); a reject without one records None.
REJECT_REASONS: tuple[str, ...] = (
    "slower on my real sizes",
    "unreadable",
    "changes numerics I care about",
    "wrong assumption",
    "other",
)


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
    reason: str | None = None  # a "rejected" record's REJECT_REASONS entry, where the user gave one

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
            reason=str(data["reason"]) if data.get("reason") else None,  # absent before reasons were asked
        )


def now() -> str:
    return datetime.now(timezone.utc).isoformat(timespec="milliseconds")


def model_of(proposer: str) -> str | None:
    return proposer.split(":", 1)[1] if proposer.startswith("llm:") else None


def logging_enabled() -> bool:
    return os.environ.get(DISABLE_ENV, "1").strip().lower() not in ("0", "false", "no", "off")


def default_log_path(workspace: Path | None) -> Path:
    """The workspace's log; without a workspace, $CUDA_AGENT_FEEDBACK_LOG, else the user data dir's (one log
    for loose files)."""
    if workspace is not None:
        return workspace / LOG_DIR / LOG_NAME
    if os.environ.get(LOG_ENV):
        return Path(os.environ[LOG_ENV]).expanduser()
    from platformdirs import user_data_dir

    return Path(user_data_dir("cuda-agent")) / LOG_NAME


def find_workspace(start: Path) -> Path | None:
    """The workspace a command run in `start` belongs to: the nearest folder at or above it that holds a
    `.cuda-agent` folder or is a git repository's root (what an editor opens as the workspace)."""
    for folder in [start, *start.parents]:
        if (folder / LOG_DIR).is_dir() or (folder / ".git").exists():
            return folder
    return None


class FeedbackLog:
    """One log: `feedback.jsonl` (appended to), `feedback.N.jsonl` (rotated), `feedback.jsonl.lock`."""

    def __init__(self, path: Path, max_file_bytes: int = MAX_FILE_BYTES, max_files: int = MAX_FILES) -> None:
        self.path = path
        self.max_file_bytes = max_file_bytes
        self.max_files = max(1, max_files)  # the current file included
        self._lock_path = path.with_name(path.name + ".lock")
        self._rotated_name = re.compile(rf"{re.escape(path.stem)}\.(\d+){re.escape(path.suffix)}")

    def append(self, data: dict[str, Any]) -> None:
        """Append one record as one line, fsynced before this returns: once it has returned, no writer
        killed at any point, this one or another, can lose it (only rotation's cap drops old files)."""
        line = (json.dumps(data, ensure_ascii=False, separators=(",", ":")) + "\n").encode()
        self.path.parent.mkdir(parents=True, exist_ok=True)
        with self._locked(create=True):
            fd = os.open(self.path, os.O_RDWR | os.O_APPEND | os.O_CREAT, 0o600)
            try:
                size = os.fstat(fd).st_size
                if size and os.pread(fd, 1, size - 1) != b"\n":
                    # The last writer died mid-line: start on a fresh line, or this record would be glued
                    # onto the torn one and skipped with it.
                    line = b"\n" + line
                view = memoryview(line)
                while view:  # a short write cannot interleave with another writer's: we hold the lock
                    view = view[os.write(fd, view) :]
                os.fsync(fd)
            finally:
                os.close(fd)
            if size + len(line) >= self.max_file_bytes:
                self._rotate()

    def files(self) -> list[Path]:
        """The log's files, oldest first: the rotated ones by number, then the current one."""
        return [path for _, path in self._rotated()] + ([self.path] if self.path.is_file() else [])

    def exists(self) -> bool:
        return bool(self.files())

    def records(self) -> Iterator[dict[str, Any]]:
        """Every complete record, oldest first, streamed (memory does not grow with the log); a torn or
        foreign line is skipped with a warning. The files are opened together under the lock, so a writer
        rotating meanwhile can neither hide a file from this reader nor show it one twice."""
        with self._locked(create=False):
            handles = []
            for path in self.files():
                with contextlib.suppress(FileNotFoundError):  # rotated away since it was listed
                    handles.append(open(path, "rb"))  # noqa: SIM115 (closed below, after reading)
        try:
            for handle in handles:
                for number, raw in enumerate(handle, start=1):
                    if not raw.strip():
                        continue
                    try:
                        data = json.loads(raw)
                    except ValueError as exc:
                        logger.warning("%s:%d: skipped an unreadable record (%s)", handle.name, number, exc)
                        continue
                    if isinstance(data, dict):
                        yield data
                    else:
                        logger.warning("%s:%d: skipped a line that is not a record", handle.name, number)
        finally:
            for handle in handles:
                handle.close()

    @contextlib.contextmanager
    def _locked(self, create: bool) -> Iterator[None]:
        try:
            fd = os.open(self._lock_path, os.O_RDWR | os.O_CREAT if create else os.O_RDONLY, 0o600)
        except OSError:
            if create:
                raise
            yield  # a reader where no writer ever was, or of a log it may only read: nothing to keep out
            return
        try:
            fcntl.flock(fd, fcntl.LOCK_EX)  # the kernel releases it when the holder dies, kill -9 included
            yield
        finally:
            os.close(fd)

    def _rotated(self) -> list[tuple[int, Path]]:
        if not self.path.parent.is_dir():
            return []
        found = []
        for entry in self.path.parent.iterdir():
            match = self._rotated_name.fullmatch(entry.name)
            if match:
                found.append((int(match.group(1)), entry))
        return sorted(found)

    def _rotate(self) -> None:
        """Under the lock: the current file becomes the next number; the oldest beyond the cap go."""
        rotated = self._rotated()
        number = rotated[-1][0] + 1 if rotated else 1
        os.replace(self.path, self.path.with_name(f"{self.path.stem}.{number}{self.path.suffix}"))
        excess = len(rotated) + 1 - (self.max_files - 1)
        for _, old in rotated[: max(0, excess)]:
            old.unlink(missing_ok=True)


def is_suggestion(data: dict[str, Any]) -> bool:
    """A suggestion record (shown, accepted, …), as the editor writes them; the others carry a `kind`."""
    return "kind" not in data and "event" in data


def append_record(path: Path, record: FeedbackRecord) -> None:
    """Append one suggestion record; a crash loses at most this record."""
    FeedbackLog(path).append(record.to_json())


def read_records(path: Path) -> list[FeedbackRecord]:
    """Every complete suggestion record, in order (the candidates' samples are left out); a torn or foreign
    line is skipped with a warning, not fatal."""
    records = []
    for data in FeedbackLog(path).records():
        if not is_suggestion(data):
            continue
        try:
            records.append(FeedbackRecord.from_json(data))
        except (ValueError, KeyError, TypeError) as exc:
            logger.warning("%s: skipped an unreadable suggestion record (%s)", path, exc)
    return records
