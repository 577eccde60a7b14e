"""An LLM's suggestion in the feedback log and the exported dataset: which proposer and model wrote it and
the whole trajectory (prompt, replies with tool calls, tool results), never the API key."""

from __future__ import annotations

import json
from dataclasses import replace
from pathlib import Path

from cuda_agent.agent.feedback import append_record, read_records
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

    export(records, tmp_path / "out")
    rows = [json.loads(line) for line in (tmp_path / "out" / "rewards.jsonl").read_text().splitlines()]
    llm_row, offline_row = rows
    assert (llm_row["proposer"], llm_row["model"], llm_row["decision"]) == (
        proposer,
        "claude-sonnet-5-5",
        "accepted",
    )
    turns = json.loads(llm_row["transcript"])
    assert [t["role"] for t in turns[:4]] == ["system", "user", "assistant", "tool"]
    assert turns[2]["tool_calls"][0]["name"] == "compile_and_test"
    assert "kernel_source" in turns[2]["tool_calls"][0]["input"]
    assert 'identifier "idx" is undefined' in turns[3]["text"]
    assert turns[-1]["role"] == "assistant" and turns[-1]["tool_calls"] == []
    assert offline_row["transcript"] is None

    markdown = render_markdown(transcript, "saxpy")
    assert markdown.startswith("# saxpy\n\n## Prompt\n") and "```cuda\n__global__ void saxpy(" in markdown


def test_records_written_before_transcripts_existed_still_read(tmp_path: Path) -> None:
    data = record("old").to_json()
    del data["candidate"]["transcript"]
    log = tmp_path / "feedback.jsonl"
    log.write_text(json.dumps(data) + "\n")
    assert read_records(log) == [record("old")]
