"""The compute-sanitizer gate in the language server, end to end over stdio with the recorded GPU worker and
the stand-in compute-sanitizer (tests/test_sanitizer.py): a rewrite with a finding never reaches the editor,
not even as the best so far, and its rejection is in the result like any other; without the tool the rewrite
is shown and says it was not checked; the cudaAgent.sanitize setting turns the check off."""

from __future__ import annotations

import json
import tempfile
from pathlib import Path

import pytest_lsp
from cuda_agent.sandbox.sanitizer import SANITIZER_ENV
from lsprotocol import types
from pytest_lsp import ClientServerConfig, LanguageClient, client_capabilities

from tests.server_support import SERVE, SERVER_ENV, diagnostics_for, wait_until
from tests.test_cli_sanitizer import RACE, SAXPY_LINE
from tests.test_sanitizer import calls, fake_sanitizer
from tests.test_server_jobs import (
    ELEMENTWISE,
    JOB_TIMEOUT_S,
    RECORDING,
    is_rewrite,
    make_client,
    open_and_optimize,
    saxpy_name,
)

STAND_IN = fake_sanitizer(Path(tempfile.mkdtemp(prefix="cuda-agent-sanitizer-stand-in-")))
LOGS = STAND_IN.parent


def _config(log: str, **env: str) -> ClientServerConfig:
    return ClientServerConfig(
        server_command=SERVE,
        server_env={
            **SERVER_ENV,
            "CUDA_AGENT_RECORDED_WORKER": str(RECORDING),
            "CUDA_AGENT_CACHE_DIR": tempfile.mkdtemp(prefix="cuda-agent-sanitizer-cache-"),
            SANITIZER_ENV: str(STAND_IN),
            "FAKE_SANITIZER_LOG": str(LOGS / log),
            **env,
        },
        client_factory=make_client,
    )


async def _start(client: LanguageClient, options: object = None) -> None:
    await client.initialize_session(
        types.InitializeParams(
            capabilities=client_capabilities("visual-studio-code"), initialization_options=options
        )
    )


async def _final(client: LanguageClient):  # type: ignore[no-untyped-def]
    results = client.results  # type: ignore[attr-defined]
    await wait_until(lambda: any(not r.searching for r in results), JOB_TIMEOUT_S, "the final result")
    return next(r for r in results if not r.searching)


@pytest_lsp.fixture(config=_config("rejecting.jsonl", FAKE_SANITIZER_REPORTS=json.dumps({"racecheck": RACE})))
async def rejecting_client(lsp_client: LanguageClient):
    await _start(lsp_client)
    yield
    await lsp_client.shutdown_session()


async def test_a_rewrite_with_a_finding_is_never_shown(rejecting_client: LanguageClient, tmp_path: Path):
    client = rejecting_client
    uri = await open_and_optimize(client, tmp_path, "elementwise.cu")
    final = await _final(client)
    assert all(r.rewrite is None for r in client.results)  # type: ignore[attr-defined]  # nor as best so far
    rejected = [c for c in final.candidates if c.status == "rejected"]
    assert rejected, final.candidates
    assert all(c.reason.startswith("rejected by compute-sanitizer racecheck: Error: Race") for c in rejected)
    assert f"line {SAXPY_LINE} of the rewrite: if (i < n) y[i] = a * x[i] + y[i];" in rejected[0].reason
    assert "no faster candidate passed compute-sanitizer" in final.explanation
    published = await diagnostics_for(client, uri, 1)
    assert not any(map(is_rewrite, published))
    assert {c["tool"] for c in calls(LOGS / "rejecting.jsonl")} == {
        "memcheck",
        "racecheck",
        "synccheck",
        "initcheck",
    }


@pytest_lsp.fixture(
    config=_config("missing.jsonl", **{SANITIZER_ENV: str(LOGS / "no" / "compute-sanitizer")})
)
async def missing_client(lsp_client: LanguageClient):
    await _start(lsp_client)
    yield
    await lsp_client.shutdown_session()


async def test_without_the_tool_the_rewrite_is_shown_and_says_it_was_not_checked(
    missing_client: LanguageClient, tmp_path: Path
):
    client = missing_client
    uri = await open_and_optimize(client, tmp_path, "elementwise.cu")
    final = await _final(client)
    assert final.rewrite is not None
    assert final.rewrite.sanitizer == "not checked by compute-sanitizer: not found"
    hover = await client.text_document_hover_async(
        types.HoverParams(
            text_document=types.TextDocumentIdentifier(uri=uri), position=saxpy_name(ELEMENTWISE).start
        )
    )
    assert hover is not None and isinstance(hover.contents, types.MarkupContent)
    assert "not checked by compute-sanitizer: not found" in hover.contents.value


@pytest_lsp.fixture(config=_config("off.jsonl", FAKE_SANITIZER_REPORTS=json.dumps({"racecheck": RACE})))
async def unchecked_client(lsp_client: LanguageClient):
    await _start(lsp_client, options={"sanitize": False})
    yield
    await lsp_client.shutdown_session()


async def test_the_setting_turns_the_check_off(unchecked_client: LanguageClient, tmp_path: Path):
    client = unchecked_client
    await open_and_optimize(client, tmp_path, "elementwise.cu")
    final = await _final(client)
    assert final.rewrite is not None and final.rewrite.sanitizer == ""
    assert calls(LOGS / "off.jsonl") == []
