"""Feedback records from the real server over stdio with the recorded GPU worker: shown, then accepted,
rejected or superseded, in the workspace's `.cuda-agent/feedback.jsonl`, with the candidates' samples and
compute-sanitizer's verdicts on them."""

from __future__ import annotations

import json
import tempfile
from pathlib import Path

import pytest_lsp
from cuda_agent.agent.feedback import FeedbackLog, read_records
from cuda_agent.agent.feedback_export import export
from cuda_agent.sandbox.sanitizer import SANITIZER_ENV
from lsprotocol import types
from pytest_lsp import ClientServerConfig, LanguageClient, client_capabilities

from tests.server_support import (
    SERVE,
    SERVER_ENV,
    apply_text_edits,
    diagnostics_for,
    edits_for,
    replace_text,
    wait_until,
)
from tests.test_cli_sanitizer import RACE
from tests.test_sanitizer import fake_sanitizer
from tests.test_server_jobs import (
    ELEMENTWISE,
    JOB_TIMEOUT_S,
    RECORDING,
    is_rewrite,
    make_client,
    open_and_optimize,
    rewrite_actions,
)

WORKSPACE = Path(tempfile.mkdtemp(prefix="cuda-agent-feedback-"))
LOG = WORKSPACE / ".cuda-agent" / "feedback.jsonl"


@pytest_lsp.fixture(
    config=ClientServerConfig(
        server_command=SERVE,
        server_env={
            **SERVER_ENV,
            "CUDA_AGENT_RECORDED_WORKER": str(RECORDING),
            "CUDA_AGENT_CACHE_DIR": tempfile.mkdtemp(prefix="cuda-agent-feedback-cache-"),
        },
        client_factory=make_client,
    )
)
async def client(lsp_client: LanguageClient):
    await lsp_client.initialize_session(
        types.InitializeParams(
            capabilities=client_capabilities("visual-studio-code"), root_uri=WORKSPACE.as_uri()
        )
    )
    yield
    await lsp_client.shutdown_session()


async def shown(client: LanguageClient, name: str) -> tuple[str, list[types.Diagnostic]]:
    uri = await open_and_optimize(client, WORKSPACE, name)
    diagnostics = await diagnostics_for(client, uri, 1, lambda ds: any(map(is_rewrite, ds)), JOB_TIMEOUT_S)
    return uri, diagnostics


def records_after(count: int):
    return read_records(LOG)[count:] if LOG.is_file() else []


async def test_shown_then_accepted(client: LanguageClient):
    before = len(records_after(0))
    uri, diagnostics = await shown(client, "accept.cu")
    found = await wait_until(lambda: records_after(before), 5.0, "the shown record")
    record = found[0]
    assert record.event == "shown" and record.original.kernel == "saxpy"
    assert record.original.file_text == ELEMENTWISE and 'kernel = "saxpy"' in record.original.spec
    assert record.original.gpu == "NVIDIA H200" and record.candidate.proposer == "launch-config"
    assert (
        record.candidate.model is None and record.verification.passed and record.verification.input_sets == 5
    )
    m = record.measurement
    assert m.baseline is not None and abs(m.baseline.median_ms - 0.0832) < 1e-9
    assert m.candidate is not None and abs(m.candidate.median_ms - 0.0653) < 1e-9
    assert m.faster and m.ratio_ci is not None and abs(m.speedup - 0.0832 / 0.0653) < 1e-9
    assert "block" in record.candidate.source and record.candidate.source != ELEMENTWISE

    apply = (await rewrite_actions(client, uri, [d for d in diagnostics if is_rewrite(d)]))[0]
    resolved = await client.code_action_resolve_async(apply)
    assert resolved.edit is not None
    await client.code_action_resolve_async(apply)  # resolved (to preview) twice: not yet a decision
    await diagnostics_for(client, uri, 1)  # a round trip
    assert records_after(before + 1) == []
    # The editor applies the edit: the text becomes the rewrite, which is the acceptance.
    replace_text(client, uri, apply_text_edits(ELEMENTWISE, edits_for(resolved.edit, uri)), version=2)
    decided = await wait_until(lambda: records_after(before + 1), 5.0, "the accepted record")
    replace_text(client, uri, ELEMENTWISE + "\n", version=3)  # a later edit decides nothing more
    await diagnostics_for(client, uri, 3)
    decided = records_after(before + 1)
    assert [(r.event, r.suggestion_id) for r in decided] == [("accepted", record.suggestion_id)]
    assert decided[0].candidate == record.candidate and decided[0].timestamp >= record.timestamp


async def test_previewed_then_edited_otherwise_is_superseded(client: LanguageClient):
    before = len(records_after(0))
    uri, diagnostics = await shown(client, "preview.cu")
    apply = (await rewrite_actions(client, uri, [d for d in diagnostics if is_rewrite(d)]))[0]
    assert (await client.code_action_resolve_async(apply)).edit is not None  # looked at, not applied
    replace_text(client, uri, ELEMENTWISE.replace("// Element-wise", "// Mine"), version=2)
    found = await wait_until(lambda: records_after(before + 1), 5.0, "the decision")
    assert [r.event for r in found] == ["superseded"]


async def test_shown_then_rejected(client: LanguageClient):
    before = len(records_after(0))
    uri, _ = await shown(client, "reject.cu")
    await client.workspace_execute_command_async(
        types.ExecuteCommandParams(command="cudaAgent.rejectRewrite", arguments=[uri, "saxpy"])
    )
    found = await wait_until(
        lambda: len(records_after(before)) >= 2 and records_after(before), 5.0, "records"
    )
    assert [r.event for r in found] == ["shown", "rejected"]
    assert found[0].suggestion_id == found[1].suggestion_id


async def test_shown_then_superseded_by_an_edit(client: LanguageClient):
    before = len(records_after(0))
    uri, _ = await shown(client, "edit.cu")
    replace_text(client, uri, ELEMENTWISE.replace("// Element-wise", "// My element-wise"), version=2)
    found = await wait_until(
        lambda: len(records_after(before)) >= 2 and records_after(before), 5.0, "records"
    )
    assert [r.event for r in found] == ["shown", "superseded"]
    assert found[0].suggestion_id == found[1].suggestion_id


async def test_every_candidate_the_servers_search_evaluates_is_a_sample_in_the_workspace_log(
    client: LanguageClient,
):
    # Its own text: the other tests' searches of ELEMENTWISE are other prompts' samples.
    text = ELEMENTWISE.replace("// Element-wise", "// Sampled element-wise")
    uri = await open_and_optimize(client, WORKSPACE, "samples.cu", text)
    await diagnostics_for(client, uri, 1, lambda ds: any(map(is_rewrite, ds)), JOB_TIMEOUT_S)

    def samples() -> list[dict]:
        found = FeedbackLog(LOG).records() if LOG.is_file() else []
        return [r for r in found if r.get("kind") == "candidate" and r["original"]["file_text"] == text]

    found = await wait_until(lambda: [s for s in samples() if s["status"] == "faster"], 5.0, "samples")
    # the block-256 candidate alone (a slower machine's search may reach a later round that combines it)
    (best,) = [
        s
        for s in found
        if s["candidate"]["description"].startswith("block 256 ")
        and " + " not in s["candidate"]["description"]
    ]
    assert best["measurement"]["speedup"] == 0.0832 / 0.0653 and best["verified"]
    everything = samples()
    assert {s["original"]["kernel"] for s in everything} == {"saxpy"}
    assert {s["gpu"]["name"] for s in everything} == {"NVIDIA H200"}
    assert len({s["key"] for s in everything}) == len(everything)
    assert len(everything) > 3 and records_after(0)  # the suggestion records beside them still read


SANITIZED = Path(tempfile.mkdtemp(prefix="cuda-agent-feedback-sanitized-"))


@pytest_lsp.fixture(
    config=ClientServerConfig(
        server_command=SERVE,
        server_env={
            **SERVER_ENV,
            "CUDA_AGENT_RECORDED_WORKER": str(RECORDING),
            "CUDA_AGENT_CACHE_DIR": tempfile.mkdtemp(prefix="cuda-agent-feedback-sanitized-cache-"),
            SANITIZER_ENV: str(fake_sanitizer(SANITIZED)),
            "FAKE_SANITIZER_LOG": str(SANITIZED / "sanitizer-calls.jsonl"),
            "FAKE_SANITIZER_REPORTS": json.dumps({"racecheck": RACE}),
        },
        client_factory=make_client,
    )
)
async def racy(lsp_client: LanguageClient):
    """The server with a compute-sanitizer (a stand-in) that finds a race in every rewrite."""
    await lsp_client.initialize_session(
        types.InitializeParams(
            capabilities=client_capabilities("visual-studio-code"), root_uri=SANITIZED.as_uri()
        )
    )
    yield
    await lsp_client.shutdown_session()


async def test_the_servers_sanitizer_verdicts_are_in_the_workspace_log_beside_their_samples(
    racy: LanguageClient, tmp_path: Path
):
    await open_and_optimize(racy, SANITIZED, "racy.cu")
    results = racy.results  # type: ignore[attr-defined]
    await wait_until(lambda: any(not r.searching for r in results), JOB_TIMEOUT_S, "the final result")
    log = SANITIZED / ".cuda-agent" / "feedback.jsonl"
    records = list(FeedbackLog(log).records())
    verdicts = [r for r in records if r.get("kind") == "sanitizer"]
    assert verdicts and {(v["status"], v["check"]) for v in verdicts} == {("rejected", "racecheck")}
    keys = {r["key"] for r in records if r.get("kind") == "candidate"}
    assert {v["key"] for v in verdicts} <= keys
    assert read_records(log) == []  # nothing was shown: no suggestion to decide
    export(log, tmp_path / "out", formats=("rewards",))
    rows = [json.loads(line) for line in (tmp_path / "out" / "rewards.jsonl").read_text().splitlines()]
    rejected = [r for r in rows if r["sanitizer"] == "rejected"]
    assert len(rejected) == len(verdicts) and {(r["reward"], r["failed_check"]) for r in rejected} == {
        (-1, "racecheck")
    }
