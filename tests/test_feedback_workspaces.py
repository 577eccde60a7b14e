"""Each workspace's candidates in its own log, however the servers share a process: two editors on two
workspaces of one `serve --tcp` (one Backend, one engine), two Backends in one process, and the routing rules
for nested workspaces and loose files. The GPU worker is the recording (as in tests/test_server_jobs.py)."""

from __future__ import annotations

import asyncio
import subprocess
import sys
import tempfile
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from pathlib import Path
from typing import Any

import pytest
from cuda_agent.agent.candidate_log import CandidateLog
from cuda_agent.agent.engine import EngineSettings
from cuda_agent.agent.feedback import FeedbackLog, read_records
from cuda_agent.agent.optimize import optimize
from cuda_agent.agent.targets import load_targets
from cuda_agent.sandbox.recorded import RECORDED_WORKER_ENV
from cuda_agent.server.backend import Backend
from cuda_agent.server.feedback import SuggestionFeedback
from lsprotocol import types
from pytest_lsp import LanguageClient, client_capabilities
from pytest_lsp.client import make_test_lsp_client

from tests.llm_engine import recorded_engine
from tests.server_support import SERVER_ENV, wait_until
from tests.test_server_jobs import ELEMENTWISE, JOB_TIMEOUT_S, RECORDING


def variant(name: str) -> str:
    return ELEMENTWISE.replace("// Element-wise", f"// {name}: element-wise")


def samples(log: Path) -> list[dict[str, Any]]:
    return [r for r in FeedbackLog(log).records() if r.get("kind") == "candidate"] if log.is_file() else []


def log_of(workspace: Path) -> Path:
    return workspace / ".cuda-agent" / "feedback.jsonl"


@asynccontextmanager
async def tcp_server(cache: Path) -> AsyncIterator[int]:
    """`serve --tcp --port 0` with the recorded GPU worker; yields its port."""
    env = {**SERVER_ENV, "CUDA_AGENT_RECORDED_WORKER": str(RECORDING), "CUDA_AGENT_CACHE_DIR": str(cache)}
    process = await asyncio.create_subprocess_exec(
        sys.executable, "-m", "cuda_agent", "serve", "--tcp", "--port", "0", env=env, stderr=subprocess.PIPE
    )
    try:
        assert process.stderr is not None
        line = await asyncio.wait_for(process.stderr.readline(), timeout=30)
        assert b"listening on" in line, line
        yield int(line.decode().rsplit(":", 1)[1])
    finally:
        process.terminate()
        await process.wait()


async def editor(port: int, workspace: Path) -> tuple[LanguageClient, list[Any]]:
    """A VS Code-like client on `workspace`, keeping every cudaAgent/result notification."""
    client = make_test_lsp_client()
    results: list[Any] = []

    @client.feature("cudaAgent/result")
    def on_result(params: Any) -> None:
        results.append(params)

    await client.start_tcp("127.0.0.1", port)
    await client.initialize_session(
        types.InitializeParams(
            capabilities=client_capabilities("visual-studio-code"), root_uri=workspace.as_uri()
        )
    )
    return client, results


async def optimized(client: LanguageClient, results: list[Any], path: Path, text: str) -> None:
    path.write_text(text)
    client.text_document_did_open(
        types.DidOpenTextDocumentParams(
            types.TextDocumentItem(uri=path.as_uri(), language_id="cuda", version=1, text=text)
        )
    )
    answer = await client.workspace_execute_command_async(
        types.ExecuteCommandParams(command="cudaAgent.optimize", arguments=[path.as_uri(), "saxpy"])
    )
    assert answer["started"] is True, answer
    await wait_until(lambda: any(not r.searching for r in results), JOB_TIMEOUT_S, f"{path.name}'s result")


async def test_two_editors_on_two_workspaces_of_one_tcp_server_write_their_own_logs(tmp_path: Path):
    first, second = tmp_path / "first", tmp_path / "second"
    first.mkdir()
    second.mkdir()
    texts = {first: variant("First"), second: variant("Second")}
    async with tcp_server(tmp_path / "cache") as port:
        editors = {folder: await editor(port, folder) for folder in texts}
        try:
            # At once: both searches run on the server's one engine, interleaved.
            await asyncio.gather(
                *(optimized(client, results, folder / "kernels.cu", texts[folder])
                  for folder, (client, results) in editors.items())
            )  # fmt: skip
            for folder in texts:
                await wait_until(lambda f=folder: samples(log_of(f)), 10.0, f"{folder.name}'s samples")
        finally:
            for client, _ in editors.values():
                await client.shutdown_session()
    for folder, text in texts.items():
        found = samples(log_of(folder))
        assert len(found) > 3 and {s["original"]["file_text"] for s in found} == {text}, folder.name
        shown = read_records(log_of(folder))
        assert shown and {r.original.file_text for r in shown} == {text}


async def test_two_backends_in_one_process_write_their_own_logs(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
):
    monkeypatch.setenv(RECORDED_WORKER_ENV, str(RECORDING))
    monkeypatch.setenv("CUDA_AGENT_CACHE_DIR", tempfile.mkdtemp(prefix="cuda-agent-backends-cache-"))
    folders = [tmp_path / "one", tmp_path / "two"]
    backends = [Backend(EngineSettings(use_cache=False)) for _ in folders]
    try:
        searches = []
        for folder, backend in zip(folders, backends, strict=True):
            folder.mkdir()
            # What a session's initialize does with its workspace and the cudaAgent.feedback setting.
            SuggestionFeedback(backend.candidates).configure(folder, enabled=True)
            path = folder / "kernels.cu"
            target = load_targets(path, variant(folder.name)).find("saxpy")
            assert target is not None
            searches.append(
                backend.optimize(
                    path.as_uri(), 1, target, lambda: True, lambda _: None, 30.0, ("launch-config",)
                )
            )
        outcomes = await asyncio.gather(*searches)
    finally:
        for backend in backends:
            backend.close()
    assert all(o is not None and o.rewrite is not None for o in outcomes)
    for folder in folders:
        found = samples(log_of(folder))
        assert found and {s["original"]["file_text"] for s in found} == {variant(folder.name)}, folder.name


def test_a_file_goes_to_the_innermost_workspaces_log_and_a_loose_one_to_the_loose_sessions(tmp_path: Path):
    outer, inner, elsewhere = tmp_path / "outer", tmp_path / "outer" / "inner", tmp_path / "elsewhere"
    logs = {name: tmp_path / f"{name}.jsonl" for name in ("outer", "inner", "loose")}
    log = CandidateLog()
    log.route("outer session", outer, logs["outer"])
    log.route("inner session", inner, logs["inner"])
    log.route("loose session", None, logs["loose"])

    def search(path: Path) -> None:
        # Each its own text: the same candidates of the same prompt are written to a log once.
        target = load_targets(path, variant(path.name)).find("saxpy")
        assert target is not None
        with recorded_engine(RECORDING, recorder=log) as engine:
            optimize(engine, target, ("launch-config",), budget_s=30)

    def files_in(name: str) -> set[str]:
        return {s["original"]["file"] for s in samples(logs[name])}

    search(inner / "a.cu")
    search(outer / "b.cu")
    search(elsewhere / "c.cu")
    assert (files_in("inner"), files_in("outer"), files_in("loose")) == ({"a.cu"}, {"b.cu"}, {"c.cu"})
    # Without a loose-file session, a file outside every workspace goes to the latest session's log.
    log.unroute("loose session")
    search(elsewhere / "d.cu")
    assert files_in("inner") == {"a.cu", "d.cu"}
    # A session whose logging is off logs nothing of its workspace.
    log.route("inner session", inner, None)
    search(inner / "e.cu")
    assert "e.cu" not in files_in("inner") | files_in("outer") | files_in("loose")
