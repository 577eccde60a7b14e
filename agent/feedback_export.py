"""The feedback log as datasets that trainers read with no conversion, written streaming.

Memory stays bounded by a constant whatever the log's size (read whole, a 448 MB log took 4 GB): the log
is read once, record by record, into a temporary SQLite database beside the output, deduplicated by sample
key and grouped by prompt through its indexes; each file is then written from queries, row by row, and
Parquet in row groups. A prompt is one kernel's file and spec on one GPU model.

- `preferences` (TRL's DPOTrainer and RewardTrainer: `prompt`, `chosen`, `rejected`): on one prompt, a
  verified candidate over one that failed (compile, verification, timing, compute-sanitizer) or over one
  measured slower (the 95% intervals of their time against the original do not overlap), and a verified
  faster candidate over the original file; `source` "measured". Then the editor's users' decisions, `source`
  "user": an accepted rewrite over a rejected one, else over the original, and the original over a rejected
  one, with the user's reason for the reject where one was given (`rejected_reason`).
- `rewards` (GRPO-style: `prompt`, `completion`, `reward`): one row per distinct candidate, with CUDA
  Agent's milestone reward (`milestone_reward`) and the raw speedups beside it; a candidate that
  compute-sanitizer rejected is incorrect (−1, the tool as `failed_check`); an LLM's candidate carries its
  session's messages up to the turn that proposed it (`transcript`, JSON).
- `verl` (verl's RL layout: `data_source`, `prompt`, `ability`, `reward_model`, `extra_info`): one row per
  prompt, its ground truth the reference times the reward needs.
- `trajectories`: each LLM session as chat-format `messages` (tool calls and their results), with the
  rewards of the candidates it proposed.

Each is written as .jsonl and, with pyarrow (the `export` extra), as .parquet (verl's only as .parquet),
with a dataset card (README.md) beside them.
"""

from __future__ import annotations

import hashlib
import json
import os
import sqlite3
from collections.abc import Callable, Iterator, Sequence
from dataclasses import dataclass, field
from datetime import datetime, timezone
from pathlib import Path
from typing import Any

from cuda_agent.agent.candidate_log import CANDIDATE, SANITIZER, TORCH, TRAJECTORY, VERIFICATION, prompt_key
from cuda_agent.agent.feedback import REJECT_REASONS, FeedbackLog, FeedbackRecord, Original, is_suggestion

FORMATS = ("preferences", "rewards", "verl", "trajectories")
MILESTONE = 1.05  # "more than 5% faster"
MAX_PAIRS_PER_PROMPT = 64  # measured pairs: n candidates give up to n²/2, and one kernel would dominate
DATA_SOURCE = "cuda-agent"
ABILITY = "cuda-kernel-optimization"
_BATCH_ROWS, _BATCH_BYTES = 512, 32 * 2**20  # a Parquet row group: bounded in rows and in text


class ExportError(Exception):
    """The log cannot be exported (none there, or no record in it): the message says which."""


@dataclass
class ExportSummary:
    """What was read and written: the dataset card's figures."""

    files: list[Path] = field(default_factory=list)
    records: int = 0  # log lines read as records
    samples: int = 0  # distinct candidates
    duplicates: int = 0  # candidate records of a sample seen already (another process's, a cache's)
    prompts: int = 0
    suggestions: int = 0
    trajectories: int = 0
    torch_timed: int = 0  # prompts with a PyTorch eager time
    recorded: int = 0  # samples answered by a test recording, not a GPU
    skipped: int = 0  # records that could not be read (another version's)
    rows: dict[str, int] = field(default_factory=dict)  # by dataset
    pairs: dict[str, int] = field(default_factory=dict)  # by source
    rewards: dict[int, int] = field(default_factory=dict)  # the histogram of milestone rewards
    sanitizer: dict[str, int] = field(default_factory=dict)  # samples by compute-sanitizer's verdict
    rejections: dict[str, int] = field(default_factory=dict)  # users' rejects by their reason ("" none)
    gpus: dict[str, int] = field(default_factory=dict)  # samples by GPU
    proposers: dict[str, int] = field(default_factory=dict)
    notes: list[str] = field(default_factory=list)


def milestone_reward(
    verified: bool, candidate_ms: float | None, eager_ms: float | None, compile_ms: float | None
) -> int:
    """CUDA Agent's reward: −1 incorrect, +1 correct, +2 more than 5% faster than eager PyTorch, +3 more
    than 5% faster than both eager and torch.compile. Where PyTorch was not timed (a spec without a PyTorch
    oracle), a correct candidate is +1 whatever its speedup over the original (beside it in `speedup`)."""
    if not verified:
        return -1
    if not candidate_ms or eager_ms is None or eager_ms / candidate_ms <= MILESTONE:
        return 1
    return 3 if compile_ms is not None and compile_ms / candidate_ms > MILESTONE else 2


def prompt_text(original: Original) -> str:
    return (
        f"Rewrite the CUDA kernel `{original.kernel}` to run faster on {original.gpu}, keeping the results "
        f"its spec checks.\n\nSpec:\n{original.spec}\n\nFile:\n{original.file_text}"
    )


def export(
    log: Path,
    out: Path,
    formats: Sequence[str] = FORMATS,
    max_pairs_per_prompt: int = MAX_PAIRS_PER_PROMPT,
) -> ExportSummary:
    """Write `formats` of the log at `log` (its rotated files too) into `out`, with README.md."""
    feedback = FeedbackLog(log)
    if not feedback.exists():
        raise ExportError("no feedback log there (pass --log PATH)")
    try:
        import pyarrow  # noqa: F401 (only whether it is there)

        parquet = True
    except ImportError:
        parquet = False
    summary = ExportSummary()
    if "verl" in formats and not parquet:
        formats = [f for f in formats if f != "verl"]
        summary.notes.append(
            "verl's layout is Parquet: install pyarrow (cuda-agent[export]) for verl.parquet"
        )
    out.mkdir(parents=True, exist_ok=True)
    database = out / f".export-{os.getpid()}.sqlite"
    database.unlink(missing_ok=True)
    connection = _open(database)
    try:
        _load(connection, feedback.records(), summary)
        if not summary.records:
            raise ExportError("the feedback log holds no records")
        _apply_verifications(connection)
        _apply_sanitizer(connection)
        _count(connection, summary)
        for name in FORMATS:
            if name in formats:
                with _Rows(out, name, SCHEMAS[name], jsonl=name != "verl", parquet=parquet) as rows:
                    WRITERS[name](connection, rows, summary, max_pairs_per_prompt)
                summary.files += rows.paths
                summary.rows[name] = rows.count
        card = out / "README.md"
        card.write_text(dataset_card(summary, formats, max_pairs_per_prompt), encoding="utf-8")
        summary.files.append(card)
    finally:
        connection.close()
        database.unlink(missing_ok=True)
    return summary


# -- reading the log into SQLite -----------------------------------------------------------------------

_TABLES = """
CREATE TABLE prompts (seq INTEGER PRIMARY KEY, prompt_key TEXT UNIQUE, kernel TEXT, gpu TEXT, file TEXT,
    spec TEXT, file_text TEXT, prompt TEXT, original_ms REAL);
CREATE TABLE samples (seq INTEGER PRIMARY KEY, key TEXT UNIQUE, prompt_key TEXT, completion TEXT,
    completion_hash TEXT, verified INTEGER, faster INTEGER, status TEXT, reason TEXT, failed_check TEXT,
    candidate_ms REAL, original_ms REAL, speedup REAL, ratio_lo REAL, ratio_hi REAL, proposer TEXT,
    model TEXT, description TEXT, block TEXT, flags TEXT, driver TEXT, timestamp TEXT, sanitizer TEXT);
CREATE INDEX samples_by_prompt ON samples (prompt_key, seq);
CREATE INDEX samples_by_completion ON samples (prompt_key, completion_hash);
CREATE TABLE torch (prompt_key TEXT PRIMARY KEY, eager_ms REAL, compile_ms REAL);
CREATE TABLE sanitizer (key TEXT PRIMARY KEY, status TEXT, rank INTEGER, failed_check TEXT, summary TEXT);
CREATE TABLE verifications (key TEXT PRIMARY KEY, failed_check TEXT, reason TEXT);
CREATE TABLE sessions (seq INTEGER PRIMARY KEY, session TEXT UNIQUE, prompt_key TEXT, record TEXT);
CREATE TABLE proposals (key TEXT PRIMARY KEY, session TEXT, turn INTEGER);
CREATE TABLE suggestions (seq INTEGER PRIMARY KEY, sid TEXT UNIQUE, prompt_key TEXT, completion_hash TEXT,
    record TEXT, decision TEXT, decision_reason TEXT);
CREATE INDEX suggestions_by_prompt ON suggestions (prompt_key, seq);
CREATE INDEX suggestions_by_completion ON suggestions (prompt_key, completion_hash);
"""


def _open(path: Path) -> sqlite3.Connection:
    connection = sqlite3.connect(path)
    # A scratch database: no journal, no fsync, a page cache of 16 MiB (sorts past it spill to files).
    for pragma in ("journal_mode = OFF", "synchronous = OFF", "cache_size = -16384", "temp_store = FILE"):
        connection.execute(f"PRAGMA {pragma}")
    connection.executescript(_TABLES)
    connection.create_function("milestone_reward", 4, milestone_reward, deterministic=True)
    connection.create_function("pair_order", 2, _pair_order, deterministic=True)
    return connection


def _load(connection: sqlite3.Connection, records: Iterator[dict[str, Any]], summary: ExportSummary) -> None:
    loaders: dict[str, Callable[[sqlite3.Connection, dict[str, Any], ExportSummary], None]] = {
        CANDIDATE: _load_sample,
        TORCH: _load_torch,
        TRAJECTORY: _load_session,
        SANITIZER: _load_sanitizer,
        VERIFICATION: _load_verification,
    }
    with connection:
        for number, data in enumerate(records, start=1):
            load = _load_suggestion if is_suggestion(data) else loaders.get(str(data.get("kind")))
            if load is None:
                continue
            try:
                load(connection, data, summary)
            except (KeyError, TypeError, ValueError, AttributeError) as exc:  # a record of another version
                if not summary.skipped:
                    summary.notes.append(f"record {number} could not be read ({type(exc).__name__}: {exc})")
                summary.skipped += 1
                continue
            summary.records += 1
            if number % 5000 == 0:
                connection.commit()


def _hash(text: str) -> str:
    return hashlib.sha256(text.encode()).hexdigest()[:32]


def _add_prompt(
    connection: sqlite3.Connection, key: str, original: Original, file: str, ms: float | None
) -> None:
    connection.execute(
        "INSERT OR IGNORE INTO prompts VALUES (NULL, ?, ?, ?, ?, ?, ?, ?, ?)",
        (
            key,
            original.kernel,
            original.gpu,
            file,
            original.spec,
            original.file_text,
            prompt_text(original),
            ms,
        ),
    )


def _load_sample(connection: sqlite3.Connection, data: dict[str, Any], summary: ExportSummary) -> None:
    o, c, m = data["original"], data["candidate"], data.get("measurement")
    original = Original(o["file_text"], o["kernel"], o["spec"], o["gpu"])
    original_ms = (o.get("timing") or {}).get("median_ms")
    _add_prompt(connection, data["prompt_key"], original, o.get("file", ""), original_ms)
    failures = (
        (data.get("verification") or {}).get("failures") or (m or {}).get("timed_output_failures") or []
    )
    error = data.get("error")
    check = failures[0]["check"] if failures else "compile" if not data["compile"]["ok"] else None
    check = check or (error["kind"] if error else None)  # a hang or a crash: the worker's word for it
    ratio = (m or {}).get("ratio_ci") or (None, None)
    inserted = connection.execute(
        f"INSERT OR IGNORE INTO samples VALUES (NULL, {', '.join('?' * 21)}, NULL)",  # sanitizer: later
        (
            data["key"], data["prompt_key"], c["source"], _hash(c["source"]), bool(data["verified"]),
            bool(data["verified"] and m and m["faster"]), data["status"], data.get("reason", ""), check,
            m["candidate"]["median_ms"] if m else None, m["baseline"]["median_ms"] if m else original_ms,
            m["speedup"] if m else None, ratio[0], ratio[1], c["proposer"], c.get("model"), c["description"],
            json.dumps(c.get("block")), json.dumps(c.get("flags") or []), data["gpu"]["driver_version"],
            data["timestamp"],
        ),
    )  # fmt: skip
    if not inserted.rowcount:
        summary.duplicates += 1


def _load_torch(connection: sqlite3.Connection, data: dict[str, Any], summary: ExportSummary) -> None:
    compiled = data.get("compiled")
    connection.execute(
        "INSERT OR REPLACE INTO torch VALUES (?, ?, ?)",  # the latest measurement of a prompt
        (data["prompt_key"], data["eager"]["median_ms"], compiled["median_ms"] if compiled else None),
    )


# A candidate checked more than once (another run, another process) keeps its gravest verdict: one finding
# makes it incorrect whatever other runs saw (a race need not show every time).
_VERDICT_RANK = {"rejected": 2, "passed": 1, "not_checked": 0}


def _load_sanitizer(connection: sqlite3.Connection, data: dict[str, Any], summary: ExportSummary) -> None:
    status = str(data["status"])
    connection.execute(
        """INSERT INTO sanitizer VALUES (?, ?, ?, ?, ?) ON CONFLICT (key) DO UPDATE SET
            status = excluded.status, rank = excluded.rank, failed_check = excluded.failed_check,
            summary = excluded.summary WHERE excluded.rank > sanitizer.rank""",
        (data["key"], status, _VERDICT_RANK[status], data.get("check"), data.get("summary", "")),
    )


def _apply_sanitizer(connection: sqlite3.Connection) -> None:
    """Each verdict onto its sample, once the whole log is read (a verdict may be read before its sample):
    a rejected candidate is no longer verified, failed by the tool that found something."""
    with connection:
        connection.execute(
            "UPDATE samples SET sanitizer = (SELECT status FROM sanitizer z WHERE z.key = samples.key)"
        )
        connection.execute(
            """UPDATE samples SET verified = 0, faster = 0, status = 'rejected',
                failed_check = (SELECT failed_check FROM sanitizer z WHERE z.key = samples.key),
                reason = (SELECT summary FROM sanitizer z WHERE z.key = samples.key)
            WHERE sanitizer = 'rejected'"""
        )


def _load_verification(connection: sqlite3.Connection, data: dict[str, Any], summary: ExportSummary) -> None:
    if data["status"] == "rejected":
        connection.execute(
            "INSERT OR IGNORE INTO verifications VALUES (?, ?, ?)",
            (data["key"], data.get("check"), data.get("reason", "")),
        )


def _apply_verifications(connection: sqlite3.Connection) -> None:
    """A candidate the search passed on a few input sets that failed the rest before it was shown: no
    longer verified, failed by the check that caught it."""
    with connection:
        connection.execute(
            """UPDATE samples SET verified = 0, faster = 0, status = 'rejected',
                failed_check = (SELECT failed_check FROM verifications v WHERE v.key = samples.key),
                reason = (SELECT reason FROM verifications v WHERE v.key = samples.key)
            WHERE key IN (SELECT key FROM verifications)"""
        )


def _load_session(connection: sqlite3.Connection, data: dict[str, Any], summary: ExportSummary) -> None:
    connection.execute(
        "INSERT OR IGNORE INTO sessions VALUES (NULL, ?, ?, ?)",
        (data["session"], data["prompt_key"], json.dumps(data, ensure_ascii=False)),
    )
    connection.executemany(
        "INSERT OR IGNORE INTO proposals VALUES (?, ?, ?)",  # the first session that proposed a candidate
        [(c["key"], data["session"], int(c["turn"])) for c in data["candidates"]],
    )


def _load_suggestion(connection: sqlite3.Connection, data: dict[str, Any], summary: ExportSummary) -> None:
    record = FeedbackRecord.from_json(data)
    original = record.original
    key = prompt_key(original.file_text, original.kernel, original.spec, original.gpu)
    baseline = record.measurement.baseline
    _add_prompt(connection, key, original, "", baseline.median_ms if baseline is not None else None)
    connection.execute(
        "INSERT OR IGNORE INTO suggestions VALUES (NULL, ?, ?, ?, ?, 'undecided', NULL)",
        (record.suggestion_id, key, _hash(record.candidate.source), json.dumps(record.to_json())),
    )
    if record.event != "shown":  # only the first decision counts: later ones echo the same user action
        connection.execute(
            "UPDATE suggestions SET decision = ?, decision_reason = ? "
            "WHERE sid = ? AND decision = 'undecided'",
            (record.event, record.reason, record.suggestion_id),
        )


def _count(connection: sqlite3.Connection, summary: ExportSummary) -> None:
    one = lambda query: connection.execute(query).fetchone()[0]  # noqa: E731
    summary.samples = one("SELECT COUNT(*) FROM samples")
    summary.prompts = one("SELECT COUNT(*) FROM prompts")
    summary.suggestions = one("SELECT COUNT(*) FROM suggestions")
    summary.trajectories = one("SELECT COUNT(*) FROM sessions")
    summary.torch_timed = one("SELECT COUNT(*) FROM torch")
    summary.recorded = one("SELECT COUNT(*) FROM samples WHERE driver = 'recorded'")
    summary.gpus = dict(connection.execute(
        "SELECT p.gpu, COUNT(*) FROM samples s JOIN prompts p USING (prompt_key) GROUP BY 1 ORDER BY 2 DESC"
    ).fetchall())  # fmt: skip
    summary.proposers = dict(connection.execute(
        "SELECT proposer, COUNT(*) FROM samples GROUP BY proposer ORDER BY 2 DESC"
    ).fetchall())  # fmt: skip
    summary.rewards = dict(connection.execute(
        f"SELECT {_REWARD}, COUNT(*) FROM samples s LEFT JOIN torch t USING (prompt_key) GROUP BY 1"
    ).fetchall())  # fmt: skip
    summary.sanitizer = dict(connection.execute(
        "SELECT sanitizer, COUNT(*) FROM samples WHERE sanitizer IS NOT NULL GROUP BY 1 ORDER BY 2 DESC"
    ).fetchall())  # fmt: skip
    summary.rejections = dict(connection.execute(
        "SELECT COALESCE(decision_reason, ''), COUNT(*) FROM suggestions WHERE decision = 'rejected' "
        "GROUP BY 1 ORDER BY 2 DESC"
    ).fetchall())  # fmt: skip


_REWARD = "milestone_reward(s.verified, s.candidate_ms, t.eager_ms, t.compile_ms)"


def _pair_order(a: str, b: str) -> str:
    """A pair's place in a prompt's sample of pairs: spread over all candidates, and the same every time."""
    return hashlib.sha256(f"{a}\0{b}".encode()).hexdigest()[:12]


# -- writing rows ----------------------------------------------------------------------------------------


class _Rows:
    """One dataset's rows, written as they come: a JSONL line each, and Parquet row groups."""

    def __init__(self, out: Path, name: str, schema: Callable[[], Any], jsonl: bool, parquet: bool) -> None:
        self.paths: list[Path] = []
        self.count = 0
        self._jsonl = (out / f"{name}.jsonl").open("w", encoding="utf-8") if jsonl else None
        if self._jsonl is not None:
            self.paths.append(out / f"{name}.jsonl")
        self._parquet: Any = None
        self._schema: Any = None
        if parquet:
            import pyarrow.parquet as pq

            self._schema = schema()
            self._parquet = pq.ParquetWriter(out / f"{name}.parquet", self._schema)
            self.paths.append(out / f"{name}.parquet")
        self._batch: list[dict[str, Any]] = []
        self._batch_bytes = 0

    def add(self, row: dict[str, Any]) -> None:
        self.count += 1
        line = json.dumps(row, ensure_ascii=False)
        if self._jsonl is not None:
            self._jsonl.write(line + "\n")
        if self._parquet is not None:
            self._batch.append(row)
            self._batch_bytes += len(line)
            if len(self._batch) >= _BATCH_ROWS or self._batch_bytes >= _BATCH_BYTES:
                self._flush()

    def _flush(self) -> None:
        if self._batch:
            import pyarrow as pa

            self._parquet.write_table(pa.Table.from_pylist(self._batch, schema=self._schema))
            self._batch, self._batch_bytes = [], 0

    def __enter__(self) -> _Rows:
        return self

    def __exit__(self, *exc: object) -> None:
        if self._parquet is not None:
            self._flush()
            self._parquet.close()
        if self._jsonl is not None:
            self._jsonl.close()


def _dicts(cursor: sqlite3.Cursor) -> Iterator[dict[str, Any]]:
    names = [d[0] for d in cursor.description]
    for values in cursor:
        yield dict(zip(names, values, strict=True))


# -- rewards ---------------------------------------------------------------------------------------------

_SAMPLE_ROWS = f"""
SELECT s.*, p.prompt, p.kernel, p.gpu, t.eager_ms, t.compile_ms, {_REWARD} AS reward, pr.session, pr.turn,
    (SELECT g.decision FROM suggestions g WHERE g.prompt_key = s.prompt_key
        AND g.completion_hash = s.completion_hash AND g.decision != 'undecided' ORDER BY g.seq LIMIT 1)
        AS decision,
    (SELECT g.decision_reason FROM suggestions g WHERE g.prompt_key = s.prompt_key
        AND g.completion_hash = s.completion_hash AND g.decision != 'undecided' ORDER BY g.seq LIMIT 1)
        AS decision_reason
FROM samples s JOIN prompts p USING (prompt_key) LEFT JOIN torch t USING (prompt_key)
    LEFT JOIN proposals pr ON pr.key = s.key
ORDER BY s.seq
"""

# Suggestions the editor showed whose candidate has no sample (a log from before samples were written).
_SUGGESTION_ONLY = """
SELECT g.*, p.prompt, t.eager_ms, t.compile_ms FROM suggestions g JOIN prompts p USING (prompt_key)
    LEFT JOIN torch t USING (prompt_key)
WHERE NOT EXISTS (SELECT 1 FROM samples s WHERE s.prompt_key = g.prompt_key
    AND s.completion_hash = g.completion_hash)
ORDER BY g.seq
"""


def _rewards(connection: sqlite3.Connection, rows: _Rows, summary: ExportSummary, cap: int) -> None:
    sessions = _Sessions(connection)
    for s in _dicts(connection.execute(_SAMPLE_ROWS)):
        transcript = sessions.messages_until(s["session"], s["turn"]) if s["session"] else None
        rows.add(_reward_row(s, "measured", s["decision"] or "", transcript))
    for g in _dicts(connection.execute(_SUGGESTION_ONLY)):
        record = FeedbackRecord.from_json(json.loads(g["record"]))
        m = record.measurement
        candidate_ms = m.candidate.median_ms if m.candidate else None
        sample = {
            "prompt": g["prompt"], "completion": record.candidate.source, "key": record.suggestion_id,
            "prompt_key": g["prompt_key"], "verified": record.verification.passed,
            "reward": milestone_reward(
                record.verification.passed, candidate_ms, g["eager_ms"], g["compile_ms"]
            ),
            "speedup": m.speedup, "candidate_ms": candidate_ms,
            "original_ms": m.baseline.median_ms if m.baseline else None, "eager_ms": g["eager_ms"],
            "compile_ms": g["compile_ms"] if g["compile_ms"] is not None else m.torch_compile_ms,
            "status": "faster" if m.faster else "verified", "reason": "", "failed_check": None,
            "kernel": record.original.kernel, "gpu": record.original.gpu,
            "proposer": record.candidate.proposer, "model": record.candidate.model,
            "description": record.candidate.description, "timestamp": record.timestamp, "block": None,
            "flags": json.dumps(list(record.candidate.flags)), "sanitizer": None,
            "decision_reason": g["decision_reason"],
        }  # fmt: skip
        transcript = _chat(list(record.candidate.transcript)) if record.candidate.transcript else None
        rows.add(_reward_row(sample, "suggestion", g["decision"], transcript))


def _reward_row(
    s: dict[str, Any], source: str, decision: str, transcript: list[dict[str, Any]] | None
) -> dict[str, Any]:
    candidate_ms = s["candidate_ms"]
    return {
        "prompt": s["prompt"],
        "completion": s["completion"],
        "reward": s["reward"],
        "speedup": s["speedup"],  # over the original kernel, both timed interleaved on the same inputs
        "speedup_vs_eager": s["eager_ms"] / candidate_ms if s["eager_ms"] and candidate_ms else None,
        "speedup_vs_compile": s["compile_ms"] / candidate_ms if s["compile_ms"] and candidate_ms else None,
        "verified": bool(s["verified"]),
        "status": s["status"],
        "failed_check": s["failed_check"],
        "reason": s["reason"],
        "candidate_ms": candidate_ms,
        "original_ms": s["original_ms"],
        "torch_eager_ms": s["eager_ms"],
        "torch_compile_ms": s["compile_ms"],
        "kernel": s["kernel"],
        "gpu": s["gpu"],
        "proposer": s["proposer"],
        "model": s["model"],
        "description": s["description"],
        "block": json.loads(s["block"]) if s["block"] else None,
        "flags": json.loads(s["flags"]),
        "sanitizer": s["sanitizer"],  # compute-sanitizer's verdict where the gate checked it, else None
        "source": source,
        "decision": decision,
        "decision_reason": s["decision_reason"],  # a user's reason for rejecting it
        "sample_key": s["key"],
        "prompt_key": s["prompt_key"],
        "timestamp": s["timestamp"],
        "transcript": json.dumps(transcript, ensure_ascii=False) if transcript else None,
    }


class _Sessions:
    """LLM sessions' messages, read from the database one session at a time (its candidates are
    consecutive, so the last one read is kept)."""

    def __init__(self, connection: sqlite3.Connection) -> None:
        self._connection = connection
        self._session: str | None = None
        self._transcript: list[dict[str, Any]] = []

    def messages_until(self, session: str, turn: int) -> list[dict[str, Any]]:
        if session != self._session:
            found = self._connection.execute("SELECT record FROM sessions WHERE session = ?", (session,))
            row = found.fetchone()
            self._session = session
            self._transcript = json.loads(row[0])["transcript"] if row else []
        return _chat(self._transcript[: turn + 1])


def _chat(transcript: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """Transcript turns (agent/llm/transcript.py) as chat messages in OpenAI's format, which chat templates
    and TRL read: a tool call's arguments as JSON text, a tool result naming its call."""
    messages = []
    for turn in transcript:
        calls = [
            {
                "id": call.get("id", ""),
                "type": "function",
                "function": {"name": call.get("name", ""), "arguments": json.dumps(call.get("input"))},
            }
            for call in turn.get("tool_calls") or ()
        ]
        messages.append(
            {
                "role": turn.get("role", "user"),
                "content": turn.get("text", ""),
                "tool_calls": calls,
                "tool_call_id": turn.get("tool_call_id") or None,
                "name": turn.get("tool_name") or None,
            }
        )
    return messages


# -- preferences -------------------------------------------------------------------------------------------

_MEASURED_PAIRS = """
SELECT a.seq AS chosen, b.seq AS rejected FROM samples a JOIN samples b ON b.prompt_key = a.prompt_key
WHERE a.prompt_key = ? AND a.verified AND a.seq != b.seq
    AND (NOT b.verified OR (a.ratio_hi IS NOT NULL AND b.ratio_lo IS NOT NULL AND a.ratio_hi < b.ratio_lo))
ORDER BY pair_order(a.key, b.key) LIMIT ?
"""
_OVER_ORIGINAL = "SELECT seq FROM samples WHERE prompt_key = ? AND faster ORDER BY seq LIMIT ?"
_SIDE = f"""
SELECT s.key, s.completion, s.status, s.speedup, s.proposer, {_REWARD} AS reward FROM samples s
    LEFT JOIN torch t USING (prompt_key) WHERE s.seq = ?
"""


def _preferences(connection: sqlite3.Connection, rows: _Rows, summary: ExportSummary, cap: int) -> None:
    prompts = connection.execute(
        "SELECT prompt_key, prompt, file_text, kernel, gpu FROM prompts ORDER BY seq"
    )
    for key, prompt, file_text, kernel, gpu in prompts:
        original = {"key": None, "completion": file_text, "status": "original", "speedup": 1.0,
                    "proposer": "original", "reward": None, "decision": "original"}  # fmt: skip
        common = {"prompt": prompt, "kernel": kernel, "gpu": gpu, "prompt_key": key}
        measured = [
            (_side(connection, chosen), _side(connection, rejected))
            for chosen, rejected in connection.execute(_MEASURED_PAIRS, (key, cap)).fetchall()
        ] + [
            (_side(connection, chosen), original)
            for (chosen,) in connection.execute(_OVER_ORIGINAL, (key, cap))
        ]
        pairs = [(c, r, "measured") for c, r in measured] + list(_user_pairs(connection, key, original))
        for chosen, rejected, source in pairs:
            rows.add(_pair(common, source, chosen, rejected))
            summary.pairs[source] = summary.pairs.get(source, 0) + 1


def _side(connection: sqlite3.Connection, seq: int) -> dict[str, Any]:
    side = next(_dicts(connection.execute(_SIDE, (seq,))))
    side["decision"] = ""
    return side


def _user_pairs(
    connection: sqlite3.Connection, key: str, original: dict[str, Any]
) -> Iterator[tuple[dict[str, Any], dict[str, Any], str]]:
    """The editor's suggestions on this prompt: the users' decisions, else (only shown) the verified faster
    rewrites over the original."""
    found = connection.execute(
        "SELECT record, decision, decision_reason FROM suggestions WHERE prompt_key = ? ORDER BY seq", (key,)
    )
    accepted, rejected, shown = [], [], []
    for record_json, decision, reason in found:
        record = FeedbackRecord.from_json(json.loads(record_json))
        side = {"key": record.suggestion_id, "completion": record.candidate.source, "status": "verified",
                "speedup": record.measurement.speedup, "proposer": record.candidate.proposer, "reward": None,
                "decision": decision, "decision_reason": reason}  # fmt: skip
        {"accepted": accepted, "rejected": rejected}.get(decision, shown).append((side, record))
    if accepted and rejected:
        yield from ((a, r, "user") for a, _ in accepted for r, _ in rejected)
    elif accepted:
        yield from ((a, original, "user") for a, _ in accepted)
    elif rejected:
        yield from ((original, r, "user") for r, _ in rejected)
    else:
        yield from ((s, original, "shown") for s, record in shown if record.measurement.faster)


def _pair(
    common: dict[str, Any], source: str, chosen: dict[str, Any], rejected: dict[str, Any]
) -> dict[str, Any]:
    return {
        "prompt": common["prompt"],
        "chosen": chosen["completion"],
        "rejected": rejected["completion"],
        "source": source,
        "kernel": common["kernel"],
        "gpu": common["gpu"],
        "prompt_key": common["prompt_key"],
        **{f"{name}_{what}": side[what] for name, side in (("chosen", chosen), ("rejected", rejected))
           for what in ("key", "status", "speedup", "reward", "proposer", "decision")},
        # Why the user rejected the rejected side (one of REJECT_REASONS); None where not said or not theirs.
        "rejected_reason": rejected.get("decision_reason"),
    }  # fmt: skip


# -- verl --------------------------------------------------------------------------------------------------

_TASKS = f"""
SELECT p.prompt_key, p.prompt, p.kernel, p.gpu, p.file, p.spec, p.original_ms, t.eager_ms, t.compile_ms,
    COUNT(s.seq) AS samples, COALESCE(SUM(s.verified), 0) AS verified,
    MAX(CASE WHEN s.seq IS NOT NULL THEN {_REWARD} END) AS best_reward,
    MAX(CASE WHEN s.faster THEN s.speedup END) AS best_speedup
FROM prompts p LEFT JOIN samples s USING (prompt_key) LEFT JOIN torch t USING (prompt_key)
GROUP BY p.prompt_key ORDER BY p.seq
"""


def _verl(connection: sqlite3.Connection, rows: _Rows, summary: ExportSummary, cap: int) -> None:
    for index, task in enumerate(_dicts(connection.execute(_TASKS))):
        truth = {
            "kernel": task["kernel"], "gpu": task["gpu"], "spec": task["spec"],
            "original_ms": task["original_ms"], "torch_eager_ms": task["eager_ms"],
            "torch_compile_ms": task["compile_ms"], "milestone": MILESTONE,
            "rewards": {"incorrect": -1, "correct": 1, "faster_than_eager": 2,
                        "faster_than_eager_and_compile": 3},
        }  # fmt: skip
        rows.add(
            {
                "data_source": DATA_SOURCE,
                "prompt": [{"role": "user", "content": task["prompt"]}],
                "ability": ABILITY,
                "reward_model": {"style": "rule", "ground_truth": json.dumps(truth)},
                "extra_info": {
                    "split": "train", "index": index, "prompt_key": task["prompt_key"],
                    "kernel": task["kernel"], "gpu": task["gpu"], "file": task["file"],
                    "samples": task["samples"], "verified": task["verified"],
                    "best_reward": task["best_reward"], "best_speedup": task["best_speedup"],
                },
            }
        )  # fmt: skip


# -- trajectories ------------------------------------------------------------------------------------------

_CANDIDATE_REWARD = f"""
SELECT {_REWARD}, s.speedup, s.faster FROM samples s LEFT JOIN torch t USING (prompt_key) WHERE s.key = ?
"""


def _trajectories(connection: sqlite3.Connection, rows: _Rows, summary: ExportSummary, cap: int) -> None:
    for (record_json,) in connection.execute("SELECT record FROM sessions ORDER BY seq"):
        session = json.loads(record_json)
        rewards, speedups = [], []
        for candidate in session["candidates"]:
            found = connection.execute(_CANDIDATE_REWARD, (candidate["key"],)).fetchone()
            if found is not None:
                rewards.append(found[0])
                if found[2]:
                    speedups.append(found[1])
        rows.add(
            {
                "messages": _chat(session["transcript"]),
                "session": session["session"], "prompt_key": session["prompt_key"],
                "kernel": session["kernel"], "gpu": session["gpu"], "proposer": session["proposer"],
                "model": session["model"], "stop_reason": session["stop_reason"],
                "candidates": len(session["candidates"]), "rewards": rewards,
                "best_reward": max(rewards) if rewards else None,
                "best_speedup": max(speedups) if speedups else None, "cost_usd": session["cost_usd"],
            }
        )  # fmt: skip


# -- schemas and the card ------------------------------------------------------------------------------------


def _preferences_schema() -> Any:
    import pyarrow as pa

    sides = [
        pa.field(f"{name}_{what}", kind)
        for name in ("chosen", "rejected")
        for what, kind in (("key", pa.string()), ("status", pa.string()), ("speedup", pa.float64()),
                           ("reward", pa.int64()), ("proposer", pa.string()), ("decision", pa.string()))
    ]  # fmt: skip
    text = ("prompt", "chosen", "rejected", "source", "kernel", "gpu", "prompt_key")
    reason = [pa.field("rejected_reason", pa.string())]
    return pa.schema([pa.field(name, pa.string()) for name in text] + sides + reason)


def _rewards_schema() -> Any:
    import pyarrow as pa

    s, f = pa.string(), pa.float64()
    return pa.schema([
        ("prompt", s), ("completion", s), ("reward", pa.int64()), ("speedup", f), ("speedup_vs_eager", f),
        ("speedup_vs_compile", f), ("verified", pa.bool_()), ("status", s), ("failed_check", s),
        ("reason", s), ("candidate_ms", f), ("original_ms", f), ("torch_eager_ms", f),
        ("torch_compile_ms", f), ("kernel", s), ("gpu", s), ("proposer", s), ("model", s),
        ("description", s), ("block", pa.list_(pa.int64())), ("flags", pa.list_(s)), ("sanitizer", s),
        ("source", s), ("decision", s), ("decision_reason", s), ("sample_key", s), ("prompt_key", s),
        ("timestamp", s), ("transcript", s),
    ])  # fmt: skip


def _verl_schema() -> Any:
    import pyarrow as pa

    s, i = pa.string(), pa.int64()
    return pa.schema([
        ("data_source", s),
        ("prompt", pa.list_(pa.struct([("role", s), ("content", s)]))),
        ("ability", s),
        ("reward_model", pa.struct([("style", s), ("ground_truth", s)])),
        ("extra_info", pa.struct([
            ("split", s), ("index", i), ("prompt_key", s), ("kernel", s), ("gpu", s), ("file", s),
            ("samples", i), ("verified", i), ("best_reward", i), ("best_speedup", pa.float64()),
        ])),
    ])  # fmt: skip


def _messages_type() -> Any:
    import pyarrow as pa

    s = pa.string()
    call = pa.struct([("id", s), ("type", s), ("function", pa.struct([("name", s), ("arguments", s)]))])
    return pa.list_(pa.struct([("role", s), ("content", s), ("tool_calls", pa.list_(call)),
                               ("tool_call_id", s), ("name", s)]))  # fmt: skip


def _trajectories_schema() -> Any:
    import pyarrow as pa

    s = pa.string()
    return pa.schema([
        ("messages", _messages_type()), ("session", s), ("prompt_key", s), ("kernel", s), ("gpu", s),
        ("proposer", s), ("model", s), ("stop_reason", s), ("candidates", pa.int64()),
        ("rewards", pa.list_(pa.int64())), ("best_reward", pa.int64()), ("best_speedup", pa.float64()),
        ("cost_usd", pa.float64()),
    ])  # fmt: skip


# Each dataset's rows, written from the database; `cap`: measured pairs a prompt.
WRITERS: dict[str, Callable[[sqlite3.Connection, _Rows, ExportSummary, int], None]] = {
    "preferences": _preferences,
    "rewards": _rewards,
    "verl": _verl,
    "trajectories": _trajectories,
}
SCHEMAS: dict[str, Callable[[], Any]] = {
    "preferences": _preferences_schema,
    "rewards": _rewards_schema,
    "verl": _verl_schema,
    "trajectories": _trajectories_schema,
}


_FILES = {
    "preferences": """`prompt`, `chosen`, `rejected` for TRL's `DPOTrainer` and `RewardTrainer`. `source`
  `measured`: on one prompt, a verified candidate over one that failed (compile, verification or
  timed-output checks) or that was measured slower (the 95% intervals of their time against the original
  do not overlap), and a verified faster candidate over the original file (at most {cap} candidate pairs
  a prompt, sampled the same way every export); `user`: an editor user's decision (an accepted rewrite
  over a rejected one, else over the original; the original over a rejected one), with the user's
  one-click reason for a reject in `rejected_reason` ({reasons}; null where none was given); `shown`: a
  rewrite shown in the editor and not decided, over the original.""",
    "rewards": """`prompt`, `completion`, `reward` for GRPO-style training: one row per distinct
  candidate, with the raw speedups, the failed check and the timings beside the reward; compute-sanitizer's
  verdict where the candidate was checked (`sanitizer`); a user's decision and reject reason where it was
  shown in the editor (`decision`, `decision_reason`); an LLM's candidate carries its session's chat
  messages up to the turn that proposed it (`transcript`, JSON text).""",
    "verl": """verl's RL layout (`data_source`, `prompt`, `ability`, `reward_model`, `extra_info`): one
  row per prompt; `reward_model.ground_truth` (JSON) holds the reference times the milestone reward
  needs.""",
    "trajectories": """each LLM session as chat-format `messages` (OpenAI's tool-call format), with the
  rewards of the candidates it proposed, in order.""",
}

_CARD = """---
pretty_name: cuda-agent kernel optimisation feedback
tags: [cuda, code, reinforcement-learning, preference]
---

# cuda-agent feedback

Exported {when} by `cuda-agent feedback export`. Every candidate rewrite the engine compiled, verified and
timed is a sample. A prompt is one kernel's file and spec on one GPU model ("Rewrite the CUDA kernel … to
run faster on GPU, keeping the results its spec checks", the spec, the whole file); a completion is the
whole rewritten file.

## Files

{files}

## Rewards

CUDA Agent's milestone reward (arXiv 2602.24286): −1 incorrect (did not compile, failed a check, hung or
crashed, or compute-sanitizer's memcheck, racecheck, initcheck or synccheck found something in it: that
tool is its `failed_check`), +1 correct, +2 more than 5% faster than eager PyTorch, +3 more than 5% faster
than both eager PyTorch and torch.compile (`time_eager / time_candidate > {milestone}`). PyTorch's times
are the spec's PyTorch oracle's at the benchmark size on the same GPU; where none was timed (a spec without
one), a correct candidate is +1, and its speedup over the original kernel stands beside it (`speedup`: both
timed interleaved on the same inputs, L2 flushed between runs).

| reward | samples |
| ---: | ---: |
{histogram}

## Counts

- samples (distinct candidates): {samples:,} ({duplicates:,} repeated records counted once)
- prompts: {prompts:,} ({torch_timed:,} with PyTorch times)
- preference pairs: {pairs}
- editor suggestions: {suggestions:,}; rejected by users: {rejections}
- checked by compute-sanitizer: {sanitizer}
- LLM sessions: {trajectories:,}
- proposers: {proposers}

## GPUs

{gpus}
"""


def dataset_card(summary: ExportSummary, formats: Sequence[str], cap: int = MAX_PAIRS_PER_PROMPT) -> str:
    """README.md for the exported files: what each holds, how rewards were computed, the GPUs, counts."""
    written = sorted(p.name for p in summary.files)
    files = []
    for name in FORMATS:
        if name in formats:
            names = ", ".join(f"`{n}`" for n in written if n.split(".")[0] == name)
            rows = summary.rows.get(name, 0)
            counted = f"{rows:,} row{'' if rows == 1 else 's'}"
            reasons = ", ".join(f'"{r}"' for r in REJECT_REASONS)
            files.append(f"- {names} ({counted}): " + _FILES[name].format(cap=cap, reasons=reasons))
    pairs = f"{sum(summary.pairs.values()):,}"
    if summary.pairs:
        pairs += " (" + ", ".join(f"{k} {v:,}" for k, v in sorted(summary.pairs.items())) + ")"
    card = _CARD.format(
        when=datetime.now(timezone.utc).isoformat(timespec="seconds"),
        files="\n".join(files),
        milestone=MILESTONE,
        histogram="\n".join(f"| {r:+d} | {n:,} |" for r, n in sorted(summary.rewards.items())),
        samples=summary.samples,
        duplicates=summary.duplicates,
        prompts=summary.prompts,
        torch_timed=summary.torch_timed,
        pairs=pairs,
        suggestions=summary.suggestions,
        rejections=_rejections(summary.rejections),
        sanitizer=", ".join(f"{k} {v:,}" for k, v in summary.sanitizer.items()) or "none",
        trajectories=summary.trajectories,
        proposers=", ".join(f"{k} {v:,}" for k, v in summary.proposers.items()) or "none",
        gpus="\n".join(f"- {gpu}: {n:,} samples" for gpu, n in summary.gpus.items()) or "none",
    )
    if summary.recorded:
        card += f"\n{summary.recorded:,} samples were answered by a test recording, not measured on a GPU.\n"
    if summary.notes:
        card += "\n## Notes\n\n" + "".join(f"- {note}\n" for note in summary.notes[:20])
    return card


def _rejections(by_reason: dict[str, int]) -> str:
    """Users' rejects for the card: `3 (slower on my real sizes 2, no reason given 1)`."""
    total = sum(by_reason.values())
    if not total:
        return "0"
    parts = ", ".join(f"{reason or 'no reason given'} {n:,}" for reason, n in by_reason.items())
    return f"{total:,} ({parts})"
