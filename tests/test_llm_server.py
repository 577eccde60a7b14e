"""The LLM proposer in the editor, end to end: the real server over stdio, the real `anthropic` SDK against
a local scripted Messages API, the GPU worker replaced by the H200 recording. Progress says the turn, the
result carries the session, its transcript opens with a command, and the feedback log keeps the trajectory
of the suggestion, never the API key."""

from __future__ import annotations

import tempfile
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
import pytest_lsp
from cuda_agent.agent.feedback import read_records
from lsprotocol import types
from pytest_lsp import ClientServerConfig, LanguageClient, client_capabilities

from tests.llm_scripted import ScriptedApi, recorded_session
from tests.server_support import SERVE, SERVER_ENV, diagnostics_for, wait_until
from tests.test_server_jobs import (
    ELEMENTWISE,
    JOB_TIMEOUT_S,
    RECORDING,
    is_rewrite,
    make_client,
    open_and_optimize,
)

KEY = "test-key-lsp-0123456789"
MODEL = "claude-sonnet-5-5"
# The server never inherits a key or an address from the machine: these tests must not reach a real API.
ENV = {
    **{k: v for k, v in SERVER_ENV.items() if not k.startswith(("ANTHROPIC_", "OPENAI_", "CUDA_AGENT_LLM_"))},
    "CUDA_AGENT_RECORDED_WORKER": str(RECORDING),
    "CUDA_AGENT_CACHE_DIR": tempfile.mkdtemp(prefix="cuda-agent-llm-cache-"),
}


@pytest.fixture
def api() -> Iterator[ScriptedApi]:
    with ScriptedApi(recorded_session()) as scripted:
        yield scripted


@pytest_lsp.fixture(
    config=ClientServerConfig(server_command=SERVE, server_env=ENV, client_factory=make_client)
)
async def client(lsp_client: LanguageClient):
    yield
    await lsp_client.shutdown_session()


async def start(client: LanguageClient, workspace: Path, settings: dict[str, Any]) -> None:
    """As VS Code does: the cudaAgent section answered to workspace/configuration."""
    client.set_configuration(settings, section="cudaAgent")
    await client.initialize_session(
        types.InitializeParams(
            capabilities=client_capabilities("visual-studio-code"), root_uri=workspace.as_uri()
        )
    )


async def test_the_llm_rewrite_is_shown_with_its_progress_and_transcript(
    client: LanguageClient, api: ScriptedApi, tmp_path: Path
) -> None:
    llm = {"provider": "anthropic", "model": "", "baseUrl": api.base_url, "apiKey": KEY}
    await start(client, tmp_path, {"trigger": "manual", "proposers": ["llm"], "llm": llm})
    await wait_until(lambda: client.log_messages, 10.0, "the LLM proposer's state")
    assert client.log_messages[0].message.startswith(
        f"LLM proposer: anthropic {MODEL} at {api.base_url}; API key from the editor's "
        "cudaAgent.llm.apiKey; up to 12 turns"
    )

    uri = await open_and_optimize(client, tmp_path, "llm.cu")
    diagnostics = await diagnostics_for(client, uri, 1, lambda ds: any(map(is_rewrite, ds)), JOB_TIMEOUT_S)
    rewrite = next(d for d in diagnostics if is_rewrite(d))
    assert rewrite.message.startswith(
        "saxpy: verified rewrite 1.27× faster (0.083 ms → 0.065 ms, NVIDIA H200"
    )

    results = client.results  # type: ignore[attr-defined]
    await wait_until(lambda: any(not r.searching for r in results), JOB_TIMEOUT_S, "the final result")
    final = next(r for r in results if not r.searching)
    assert final.rewrite.proposer == f"llm:{MODEL}" and "float4" in final.rewrite.source
    assert final.llm.startswith(f"LLM {MODEL}: 5 turn(s), 3 candidate(s)")
    assert final.transcript_turns == 11 and not hasattr(final, "transcript")  # counted, not sent

    reports = next(iter(client.progress_reports.values()))
    messages = [r.message for r in reports if isinstance(r, types.WorkDoneProgressReport)]
    assert "saxpy: turn 1/12, no gain yet, est. $0.00" in messages
    assert any(m and m.startswith("saxpy: turn 5/12, best 1.27×, est. $") for m in messages), messages

    shown = await client.workspace_execute_command_async(
        types.ExecuteCommandParams(command="cudaAgent.showTranscript", arguments=[uri, "saxpy"])
    )
    assert shown["found"] and shown["proposer"] == f"llm:{MODEL}" and len(shown["turns"]) == 11
    assert shown["markdown"].startswith(f"# saxpy: LLM {MODEL}: 5 turn(s)")
    assert "## Prompt" in shown["markdown"] and "**compile_and_test**" in shown["markdown"]

    rejected = await client.workspace_execute_command_async(
        types.ExecuteCommandParams(command="cudaAgent.rejectRewrite", arguments=[uri, "saxpy"])
    )
    assert rejected == {"rejected": True}
    log = tmp_path / ".cuda-agent" / "feedback.jsonl"
    records = await wait_until(
        lambda: log.is_file() and len(read_records(log)) == 2 and read_records(log), 10.0
    )
    first, decision = records
    assert first.event == "shown" and decision.event == "rejected"
    assert (first.candidate.proposer, first.candidate.model) == (f"llm:{MODEL}", MODEL)
    # Shown as the best so far, while the session went on; the decision carries the whole conversation.
    assert 4 <= len(first.candidate.transcript) < 11 and len(decision.candidate.transcript) == 11
    assert decision.candidate.transcript[-1]["text"].startswith("The float4 rewrite at block 256 is the best")
    assert KEY not in log.read_text()
    assert all(KEY not in m.message for m in [*client.log_messages, *client.messages])


async def test_without_an_api_key_the_editor_is_told_once_and_the_offline_search_runs(
    client: LanguageClient, tmp_path: Path
) -> None:
    await start(client, tmp_path, {"trigger": "manual", "llm": {"provider": "anthropic"}})
    await wait_until(lambda: client.messages, 10.0, "a message")
    assert [m.message for m in client.messages] == [
        "The LLM proposer is disabled: no API key: set ANTHROPIC_API_KEY in the environment of "
        "cuda-agent (or cudaAgent.llm.apiKey in the editor). The offline search runs alone."
    ]
    assert client.messages[0].type == types.MessageType.Warning

    # Other text than the first test's: the server keeps results per text and would show its LLM rewrite.
    uri = await open_and_optimize(client, tmp_path, "offline.cu", "// offline only\n" + ELEMENTWISE)
    await diagnostics_for(client, uri, 1, lambda ds: any(map(is_rewrite, ds)), JOB_TIMEOUT_S)
    results = client.results  # type: ignore[attr-defined]
    await wait_until(lambda: any(not r.searching for r in results), JOB_TIMEOUT_S, "the final result")
    final = next(r for r in results if not r.searching)
    assert final.rewrite.proposer == "launch-config" and final.llm == "" and final.transcript_turns == 0
    warnings = [m for m in client.messages if "LLM" in m.message]
    assert len(warnings) == 1  # said once, not again at the job
