"""The feedback log as datasets preference and RL trainers read directly.

`preferences`: (prompt, chosen, rejected) pairs. On one prompt (kernel file + spec + GPU), every accepted
rewrite is preferred to every rejected one; where only one side exists, the rewrite is compared with the
original (accepted or shown-and-unrejected rewrite over the original; the original over a rejected one).
`rewards`: one sample per suggestion, reward as CUDA Agent's milestones: -1 failed verification, 0 correct
but not faster, 1 faster than the original, 2 faster than torch.compile where that time is known. An LLM's
suggestion carries its session's turns (`transcript`, JSON text: the prompt, each reply with its tool calls,
each tool result), so a model can be trained on whole trajectories with the suggestion's reward.
"""

from __future__ import annotations

import json
from collections import defaultdict
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from cuda_agent.agent.feedback import FeedbackRecord, Original


@dataclass(frozen=True)
class Suggestion:
    shown: FeedbackRecord
    decision: str  # accepted, rejected, superseded, or undecided


def prompt_text(original: Original) -> str:
    return (
        f"Rewrite the CUDA kernel `{original.kernel}` to run faster on {original.gpu}, keeping the results "
        f"its spec checks.\n\nSpec:\n{original.spec}\n\nFile:\n{original.file_text}"
    )


def suggestions(records: list[FeedbackRecord]) -> list[Suggestion]:
    """Each shown suggestion with its first decision (later ones are the same user action echoed)."""
    shown: dict[str, FeedbackRecord] = {}
    decisions: dict[str, str] = {}
    for record in records:
        if record.event == "shown":
            shown.setdefault(record.suggestion_id, record)
        else:
            decisions.setdefault(record.suggestion_id, record.event)
    return [Suggestion(s, decisions.get(sid, "undecided")) for sid, s in shown.items()]


def reward(record: FeedbackRecord) -> int:
    if not record.verification.passed:
        return -1
    m = record.measurement
    if not m.faster:
        return 0
    if (
        m.torch_compile_ms is not None
        and m.candidate is not None
        and m.candidate.median_ms < m.torch_compile_ms
    ):
        return 2
    return 1


def reward_rows(found: list[Suggestion]) -> list[dict[str, Any]]:
    rows = []
    for s in found:
        r = s.shown
        rows.append(
            {
                "suggestion_id": r.suggestion_id,
                "prompt": prompt_text(r.original),
                "completion": r.candidate.source,
                "reward": reward(r),
                "decision": s.decision,
                "kernel": r.original.kernel,
                "gpu": r.original.gpu,
                "proposer": r.candidate.proposer,
                "model": r.candidate.model,
                "speedup": r.measurement.speedup,
                "verified": r.verification.passed,
                "timestamp": r.timestamp,
                "transcript": json.dumps(list(r.candidate.transcript)) if r.candidate.transcript else None,
            }
        )
    return rows


def preference_rows(found: list[Suggestion]) -> list[dict[str, Any]]:
    by_prompt: dict[Original, list[Suggestion]] = defaultdict(list)
    for s in found:
        by_prompt[s.shown.original].append(s)
    rows = []
    for original, group in by_prompt.items():
        accepted = [s for s in group if s.decision == "accepted"]
        rejected = [s for s in group if s.decision == "rejected"]
        if accepted and rejected:
            pairs = [(a, r) for a in accepted for r in rejected]
        elif accepted:
            pairs = [(a, None) for a in accepted]
        elif rejected:
            pairs = [(None, r) for r in rejected]
        else:  # only shown (undecided or superseded): verified faster rewrites over the original
            pairs = [(s, None) for s in group if s.shown.measurement.faster]
        rows += [_pair(original, chosen, rejected_) for chosen, rejected_ in pairs]
    return rows


def _pair(original: Original, chosen: Suggestion | None, rejected: Suggestion | None) -> dict[str, Any]:
    """None on a side stands for the original file."""

    def side(s: Suggestion | None) -> tuple[str, str | None, float | None, str]:
        if s is None:
            return original.file_text, None, 1.0, "original"
        return s.shown.candidate.source, s.shown.suggestion_id, s.shown.measurement.speedup, s.decision

    chosen_text, chosen_id, chosen_speedup, chosen_decision = side(chosen)
    rejected_text, rejected_id, rejected_speedup, rejected_decision = side(rejected)
    return {
        "prompt": prompt_text(original),
        "chosen": chosen_text,
        "rejected": rejected_text,
        "kernel": original.kernel,
        "gpu": original.gpu,
        "chosen_suggestion_id": chosen_id,
        "rejected_suggestion_id": rejected_id,
        "chosen_decision": chosen_decision,
        "rejected_decision": rejected_decision,
        "chosen_speedup": chosen_speedup,
        "rejected_speedup": rejected_speedup,
    }


def write_dataset(rows: list[dict[str, Any]], out: Path, name: str) -> list[Path]:
    """`name`.jsonl, and `name`.parquet when pyarrow is installed (the `export` extra)."""
    out.mkdir(parents=True, exist_ok=True)
    jsonl = out / f"{name}.jsonl"
    jsonl.write_text("".join(json.dumps(row, ensure_ascii=False) + "\n" for row in rows))
    written = [jsonl]
    try:
        import pyarrow as pa
        import pyarrow.parquet as pq
    except ImportError:
        return written
    pq.write_table(pa.Table.from_pylist(rows), out / f"{name}.parquet")
    return [*written, out / f"{name}.parquet"]


def export(records: list[FeedbackRecord], out: Path) -> list[Path]:
    found = suggestions(records)
    return write_dataset(preference_rows(found), out, "preferences") + write_dataset(
        reward_rows(found), out, "rewards"
    )
