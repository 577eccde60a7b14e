"""The feedback log and its export, without a server: crash safety and the datasets' rows and columns."""

from __future__ import annotations

import json
from dataclasses import replace
from pathlib import Path

import pyarrow.parquet as pq
from cuda_agent.agent.feedback import (
    CandidateInfo,
    FeedbackRecord,
    Measurement,
    Original,
    Timing,
    Verification,
    append_record,
    read_records,
)
from cuda_agent.agent.feedback_export import milestone_reward

from cuda_agent.cli import main

ORIGINAL = Original("__global__ void k() {}\n", "k", "// @cuda-agent spec", "NVIDIA H200")


def record(sid: str, event: str = "shown", speedup: float = 1.5, **changes: object) -> FeedbackRecord:
    shown = FeedbackRecord(
        event="shown",
        suggestion_id=sid,
        original=ORIGINAL,
        candidate=CandidateInfo(f"// rewrite {sid}\n", f"rewrite {sid}", "launch-config", None, (), ()),
        verification=Verification(True, 5, 2, "faster beyond noise"),
        measurement=Measurement(
            Timing(1.0, 0.9, 1.1, 50), Timing(1 / speedup, 0.6, 0.7, 50), speedup, (0.6, 0.7), True
        ),
        timestamp="2025-01-01T00:00:00.000+00:00",
    )
    return replace(shown, event=event, **changes)  # type: ignore[arg-type]


def test_a_torn_last_line_is_skipped_and_later_appends_still_parse(tmp_path: Path, caplog):
    log = tmp_path / "feedback.jsonl"
    append_record(log, record("a"))
    whole = json.dumps(record("b").to_json())
    with open(log, "ab") as f:  # what a process killed inside its write leaves behind
        f.write(whole[: len(whole) // 2].encode())
    assert [r.suggestion_id for r in read_records(log)] == ["a"]
    assert "skipped an unreadable record" in caplog.text

    append_record(log, record("a", "accepted"))
    records = read_records(log)
    assert [(r.suggestion_id, r.event) for r in records] == [("a", "shown"), ("a", "accepted")]
    assert records[0] == record("a")  # a record reads back exactly as written
    assert len(log.read_text().split("\n")) == 4  # a, the torn line, accepted, and the final newline


def write_log(path: Path, records: list[FeedbackRecord]) -> Path:
    for r in records:
        append_record(path, r)
    return path


def test_export_writes_the_users_pairs_and_a_reward_row_per_suggestion(tmp_path: Path):
    other = Original("__global__ void j() {}\n", "j", "// spec j", "NVIDIA H200")
    log = write_log(
        tmp_path / "feedback.jsonl",
        [
            record("a"),
            record("b", speedup=1.2),
            record("a", "accepted"),
            record("b", "rejected"),
            record("a", "rejected"),  # a later decision about the same suggestion does not count
            # Another prompt: only shown rewrites, one superseded by the user's own edit, one undecided.
            record("c", original=other),
            record("c", "superseded", original=other),
            record(
                "d",
                original=other,
                measurement=Measurement(Timing(1, 1, 1, 9), Timing(0.5, 0.5, 0.5, 9), 2.0, None, True, 0.8),
            ),
        ],
    )
    out = tmp_path / "out"
    assert main(["feedback", "export", "--log", str(log), "--out", str(out)]) == 0

    pairs = [json.loads(line) for line in (out / "preferences.jsonl").read_text().splitlines()]
    assert [(p["chosen_key"], p["rejected_key"], p["source"]) for p in pairs] == [
        ("a", "b", "user"),
        ("c", None, "shown"),
        ("d", None, "shown"),
    ]
    assert pairs[0]["chosen"] == "// rewrite a\n" and pairs[0]["rejected"] == "// rewrite b\n"
    assert pairs[1]["rejected"] == other.file_text and pairs[1]["rejected_decision"] == "original"
    assert "NVIDIA H200" in pairs[0]["prompt"] and ORIGINAL.file_text in pairs[0]["prompt"]
    assert ORIGINAL.spec in pairs[0]["prompt"]

    rewards = [json.loads(line) for line in (out / "rewards.jsonl").read_text().splitlines()]
    assert [(r["sample_key"], r["decision"], r["reward"], r["source"]) for r in rewards] == [
        ("a", "accepted", 1, "suggestion"),
        ("b", "rejected", 1, "suggestion"),
        ("c", "superseded", 1, "suggestion"),
        ("d", "undecided", 1, "suggestion"),  # faster than torch.compile, but eager PyTorch was not timed
    ]
    assert rewards[3]["torch_compile_ms"] == 0.8 and rewards[3]["speedup"] == 2.0

    table = pq.read_table(out / "preferences.parquet")
    assert table.num_rows == 3 and {"prompt", "chosen", "rejected"} <= set(table.column_names)
    rewards_table = pq.read_table(out / "rewards.parquet")
    assert rewards_table.column("reward").to_pylist() == [1, 1, 1, 1]
    assert rewards_table.column("decision").to_pylist()[0] == "accepted"
    card = (out / "README.md").read_text()
    assert "editor suggestions: 4" in card and "preference pairs: 3 (shown 2, user 1)" in card


def test_the_milestone_reward_is_cuda_agents():
    # -1 incorrect, +1 correct, +2 more than 5% faster than eager, +3 than both eager and torch.compile
    assert milestone_reward(False, 0.1, 2.0, 2.0) == -1
    assert milestone_reward(True, None, 2.0, 2.0) == 1  # verified, not timed
    assert milestone_reward(True, 1.0, None, 2.0) == 1  # eager PyTorch not timed: correct only
    assert milestone_reward(True, 1.0, 1.05, 2.0) == 1  # exactly 5% is not more than 5%
    assert milestone_reward(True, 1.0, 1.06, None) == 2
    assert milestone_reward(True, 1.0, 1.06, 1.05) == 2
    assert milestone_reward(True, 1.0, 1.06, 1.06) == 3


def test_export_names_a_missing_or_empty_log(tmp_path: Path, capsys):
    missing = tmp_path / "nope.jsonl"
    assert main(["feedback", "export", "--log", str(missing), "--out", str(tmp_path / "o")]) == 2
    assert "nope.jsonl: no feedback log" in " ".join(capsys.readouterr().err.split())  # rich wraps lines
    empty = tmp_path / "empty.jsonl"
    empty.write_text("")
    assert main(["feedback", "export", "--log", str(empty), "--out", str(tmp_path / "o")]) == 2
    assert "empty.jsonl: the feedback log holds no records" in " ".join(capsys.readouterr().err.split())


def test_export_writes_only_the_formats_asked_for(tmp_path: Path, capsys):
    log = write_log(tmp_path / "feedback.jsonl", [record("a"), record("a", "accepted")])
    out = tmp_path / "out"
    assert main(["feedback", "export", "--log", str(log), "--out", str(out), "--format", "rewards"]) == 0
    assert sorted(p.name for p in out.iterdir()) == ["README.md", "rewards.jsonl", "rewards.parquet"]
    assert "0 samples of 1 prompts" in capsys.readouterr().out
    card = (out / "README.md").read_text()
    assert "`rewards.jsonl`, `rewards.parquet` (1 row)" in card and "preferences" not in card
