"""An LLM's suggestion in the feedback log and the exported dataset: which proposer and model wrote it and
the whole trajectory (prompt, replies with tool calls, tool results), never the API key."""

from __future__ import annotations

import json
from dataclasses import replace
from pathlib import Path

from cuda_agent.agent.candidate_log import CandidateLog
from cuda_agent.agent.feedback import FeedbackLog, append_record, read_records
from cuda_agent.agent.feedback_export import export
from cuda_agent.agent.llm.settings import LlmSettings
from cuda_agent.agent.llm.transcript import render_markdown
from cuda_agent.agent.optimize import optimize
from cuda_agent.agent.targets import load_targets

from tests.llm_engine import recorded_engine
from tests.llm_scripted import ScriptedApi, recorded_session
from tests.test_feedback import record

ROOT = Path(__file__).resolve().parents[1]
KEY = "test-key-feedback-0123456789"


def test_an_llm_suggestion_is_logged_and_exported_with_its_trajectory(tmp_path: Path) -> None:
    target = load_targets(ROOT / "examples" / "elementwise.cu").find("saxpy")
    assert target is not None
    with ScriptedApi(recorded_session()) as api, recorded_engine() as engine:
        outcome = optimize(engine, target, ("llm",), llm=LlmSettings(base_url=api.base_url, api_key=KEY))
    assert outcome.llm is not None and outcome.best is not None
    transcript = outcome.llm.transcript()
    proposer = outcome.best.candidate.proposer
    candidate = replace(
        record("llm").candidate, proposer=proposer, model="claude-sonnet-5-5", transcript=transcript
    )
    shown = record("llm", candidate=candidate)
    log = tmp_path / "feedback.jsonl"
    for r in (shown, replace(shown, event="accepted"), record("offline")):
        append_record(log, r)

    records = read_records(log)
    assert records[0] == shown  # the trajectory reads back exactly as written
    assert KEY not in log.read_text()

    export(log, tmp_path / "out")
    rows = [json.loads(line) for line in (tmp_path / "out" / "rewards.jsonl").read_text().splitlines()]
    llm_row, offline_row = rows
    assert (llm_row["proposer"], llm_row["model"], llm_row["decision"]) == (
        proposer,
        "claude-sonnet-5-5",
        "accepted",
    )
    messages = json.loads(llm_row["transcript"])  # chat messages, as chat templates read them
    assert [m["role"] for m in messages[:4]] == ["system", "user", "assistant", "tool"]
    call = messages[2]["tool_calls"][0]
    assert call["type"] == "function" and call["function"]["name"] == "compile_and_test"
    assert "kernel_source" in json.loads(call["function"]["arguments"])
    assert messages[3]["tool_call_id"] == call["id"]
    assert 'identifier "idx" is undefined' in messages[3]["content"]
    assert messages[-1]["role"] == "assistant" and messages[-1]["tool_calls"] == []
    assert offline_row["transcript"] is None

    markdown = render_markdown(transcript, "saxpy")
    assert markdown.startswith("# saxpy\n\n## Prompt\n") and "```cuda\n__global__ void saxpy(" in markdown


def test_records_written_before_transcripts_existed_still_read(tmp_path: Path) -> None:
    data = record("old").to_json()
    del data["candidate"]["transcript"]
    log = tmp_path / "feedback.jsonl"
    log.write_text(json.dumps(data) + "\n")
    assert read_records(log) == [record("old")]


def test_an_llm_sessions_candidates_are_samples_with_the_turns_that_proposed_them(tmp_path: Path) -> None:
    target = load_targets(ROOT / "examples" / "elementwise.cu").find("saxpy")
    assert target is not None
    log = tmp_path / "feedback.jsonl"
    with ScriptedApi(recorded_session()) as api, recorded_engine(recorder=CandidateLog(log)) as engine:
        outcome = optimize(engine, target, ("llm",), llm=LlmSettings(base_url=api.base_url, api_key=KEY))
    assert outcome.llm is not None and KEY not in log.read_text()
    kinds = [r["kind"] for r in FeedbackLog(log).records()]
    assert kinds == ["candidate"] * len(outcome.llm.results) + ["trajectory"]

    summary = export(log, tmp_path / "out")
    assert summary.trajectories == 1 and summary.samples == len(outcome.llm.results)
    rows = [json.loads(line) for line in (tmp_path / "out" / "rewards.jsonl").read_text().splitlines()]
    # The first proposal did not compile (`idx` for `i`): −1, the compiler's error on its line.
    assert rows[0]["status"] == "compile error" and rows[0]["reward"] == -1
    assert 'identifier "idx" is undefined' in rows[0]["reason"] and rows[0]["reason"].startswith("line ")
    for row, result in zip(rows, outcome.llm.results, strict=True):
        assert row["completion"] == result.candidate.source and row["proposer"] == outcome.llm.proposer
        messages = json.loads(row["transcript"])
        # The conversation up to the model's turn that proposed this candidate, which ends it.
        proposing = messages[-1]
        assert proposing["role"] == "assistant" and proposing["tool_calls"][-1]["function"]["name"] == (
            "compile_and_test"
        )
    assert len(json.loads(rows[1]["transcript"])) > len(json.loads(rows[0]["transcript"]))

    (session,) = [
        json.loads(line) for line in (tmp_path / "out" / "trajectories.jsonl").read_text().splitlines()
    ]
    assert session["rewards"] == [row["reward"] for row in rows]
    assert [m["role"] for m in session["messages"]][:3] == ["system", "user", "assistant"]
    assert session["stop_reason"] == outcome.llm.stop_reason and session["model"] == outcome.llm.model
