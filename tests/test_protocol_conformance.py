"""The protocol as any client may speak it: the real server over stdio, the GPU worker replaced by the
recording (as in test_server_jobs.py).

A client that declares no optional capability at all still gets the whole session: diagnostics, hover in
plain text, code actions as plain commands, and "Optimize kernel" answered, its progress in the log and its
end said. A client that never answers the server's requests (Vim's ALE answers none) loses nothing either:
each request is given up, and cancelled, after its timeout. And the noise around a session: the same
diagnostics are not published twice for one version, and the settings are asked for once at start-up.
"""

from __future__ import annotations

import asyncio
import tempfile
from pathlib import Path
from typing import Any

import pytest_lsp
from cuda_agent.agent.feedback import REJECT_REASONS
from cuda_agent.server.app import REQUEST_TIMEOUT_S
from lsprotocol import types
from pytest_lsp import ClientServerConfig, LanguageClient, client_capabilities

from tests.server_support import (
    SERVE,
    SERVER_ENV,
    diagnostics_for,
    make_recording_client,
    open_document,
    replace_text,
    wait_until,
)

ROOT = Path(__file__).parent.parent
ELEMENTWISE = (ROOT / "examples" / "elementwise.cu").read_text()
RECORDING = Path(__file__).parent / "recordings" / "elementwise_h200.json"
HEADLINE = "saxpy: verified rewrite 1.27× faster (0.083 ms → 0.065 ms, NVIDIA H200, 5 input sets, 2 sizes)"
JOB_TIMEOUT_S = 60.0
SERVER_REQUESTS = (
    types.WORKSPACE_CONFIGURATION,
    types.WINDOW_WORK_DONE_PROGRESS_CREATE,
    types.WORKSPACE_APPLY_EDIT,
    types.WORKSPACE_CODE_LENS_REFRESH,
)
OUR_COMMANDS = {
    "cudaAgent.optimize",
    "cudaAgent.addSpec",
    "cudaAgent.applyRewrite",
    "cudaAgent.rejectRewrite",
    "cudaAgent.cancelOptimization",
}


def recorded_worker_env() -> dict[str, str]:
    return {
        **SERVER_ENV,
        "CUDA_AGENT_RECORDED_WORKER": str(RECORDING),
        "CUDA_AGENT_CACHE_DIR": tempfile.mkdtemp(prefix="cuda-agent-conformance-cache-"),
    }


def make_answering_nothing_client() -> LanguageClient:
    """The recording client, whose handlers of the server's requests never answer: each records when it
    was asked and, if the server gives up and cancels it ($/cancelRequest), after how long."""
    client = make_recording_client()
    asked: list[str] = []
    given_up: list[tuple[str, float]] = []

    def never(method: str) -> Any:
        async def wait_forever(params: Any) -> Any:
            loop = asyncio.get_running_loop()
            asked.append(method)
            start = loop.time()
            try:
                await asyncio.Event().wait()
            except asyncio.CancelledError:
                given_up.append((method, loop.time() - start))
                raise

        return wait_forever

    for method in SERVER_REQUESTS:
        client.protocol.fm.features[method] = never(method)
    client.asked, client.given_up = asked, given_up  # type: ignore[attr-defined]
    return client


def make_counting_client() -> LanguageClient:
    """The recording client, counting every request from the server by method (answered as pytest-lsp's
    client does: configuration from its settings, progress created)."""
    client = make_recording_client()
    asked: list[str] = []
    for method in SERVER_REQUESTS:
        original = client.protocol.fm.features.get(method)

        def counted(params: Any, method: str = method, original: Any = original) -> Any:
            asked.append(method)
            return original(params) if original is not None else None

        client.protocol.fm.features[method] = counted
    client.asked = asked  # type: ignore[attr-defined]
    return client


@pytest_lsp.fixture(
    config=ClientServerConfig(
        server_command=SERVE, server_env=recorded_worker_env(), client_factory=make_counting_client
    )
)
async def bare(lsp_client: LanguageClient):
    """A client that declares nothing optional: `ClientCapabilities()`."""
    await lsp_client.initialize_session(types.InitializeParams(capabilities=types.ClientCapabilities()))
    yield
    await lsp_client.shutdown_session()


@pytest_lsp.fixture(
    config=ClientServerConfig(
        server_command=SERVE, server_env=recorded_worker_env(), client_factory=make_answering_nothing_client
    )
)
async def silent(lsp_client: LanguageClient):
    """A client that declares what VS Code does, and then answers none of the server's requests."""
    await lsp_client.initialize_session(
        types.InitializeParams(capabilities=client_capabilities("visual-studio-code"))
    )
    yield
    await lsp_client.shutdown_session()


@pytest_lsp.fixture(
    config=ClientServerConfig(
        server_command=SERVE, server_env=recorded_worker_env(), client_factory=make_counting_client
    )
)
async def vscode(lsp_client: LanguageClient):
    await lsp_client.initialize_session(
        types.InitializeParams(capabilities=client_capabilities("visual-studio-code"))
    )
    yield
    await lsp_client.shutdown_session()


def line_of(text: str, needle: str) -> int:
    return next(i for i, t in enumerate(text.split("\n")) if needle in t)


def saxpy_name() -> types.Position:
    line = line_of(ELEMENTWISE, "void saxpy(")
    return types.Position(line=line, character=ELEMENTWISE.split("\n")[line].index("saxpy"))


def at(uri: str, position: types.Position) -> types.CodeActionParams:
    return types.CodeActionParams(
        text_document=types.TextDocumentIdentifier(uri=uri),
        range=types.Range(start=position, end=position),
        context=types.CodeActionContext(diagnostics=[]),
    )


async def test_a_client_declaring_nothing_gets_a_working_session(bare: LanguageClient, tmp_path: Path):
    client = bare
    uri = (tmp_path / "elementwise.cu").as_uri()
    open_document(client, uri, ELEMENTWISE)
    assert not [
        d for d in await diagnostics_for(client, uri, 1) if d.severity == types.DiagnosticSeverity.Error
    ]

    # A spec error appears where it was typed, and goes when fixed.
    x_shape = 'x = { role = "input", dtype = "float32", shape = ["n"]'
    broken = ELEMENTWISE.replace(x_shape, x_shape.replace('"n"', '"m"'))
    assert broken != ELEMENTWISE
    replace_text(client, uri, broken, version=2)
    errors = await diagnostics_for(client, uri, 2, lambda ds: any(d.severity == 1 for d in ds))
    assert any("unknown size 'm'" in d.message for d in errors)
    replace_text(client, uri, ELEMENTWISE, version=3)
    assert not [
        d for d in await diagnostics_for(client, uri, 3) if d.severity == types.DiagnosticSeverity.Error
    ]

    # Hover: plain text (it never said it renders Markdown), in aligned columns, without table syntax.
    hover = await client.text_document_hover_async(
        types.HoverParams(text_document=types.TextDocumentIdentifier(uri=uri), position=saxpy_name())
    )
    assert hover is not None and isinstance(hover.contents, types.MarkupContent)
    assert hover.contents.kind == types.MarkupKind.PlainText
    text = hover.contents.value
    assert "|" not in text and "**" not in text and "`" not in text
    lines = text.split("\n")
    header = next(line for line in lines if line.startswith("parameter"))
    x_row = next(line for line in lines if line.startswith("x "))
    assert x_row.index("input") == header.index("role") and x_row.index("float32") == header.index("dtype")

    # Code actions come as plain commands (it takes no CodeAction objects); none that would need an edit
    # it cannot be sent (it has no workspace/applyEdit either).
    commands = await client.text_document_code_action_async(at(uri, saxpy_name()))
    assert commands, "no code actions"
    assert all(isinstance(c, types.Command) and c.command in OUR_COMMANDS for c in commands), commands
    assert [c.title for c in commands] == ["Optimize kernel: saxpy"]
    relu = types.Position(line=line_of(ELEMENTWISE, "void relu("), character=17)
    relu_actions = await client.text_document_code_action_async(at(uri, relu))
    assert [c.title for c in relu_actions or []] == ["Optimize kernel: relu"]  # no "Add benchmark spec"

    # "Optimize kernel" is answered, and says so; its progress goes to the log, its end is said.
    answer = await client.workspace_execute_command_async(
        types.ExecuteCommandParams(command="cudaAgent.optimize", arguments=[uri, "saxpy"])
    )
    assert answer == {"started": True, "reason": "Optimizing saxpy on NVIDIA H200"}
    diagnostics = await diagnostics_for(
        client, uri, 3, lambda ds: any(d.code == "verified-rewrite" for d in ds), JOB_TIMEOUT_S
    )
    assert HEADLINE in [d.message for d in diagnostics]
    await wait_until(lambda: any(m.message == HEADLINE for m in client.messages), JOB_TIMEOUT_S, "the end")
    shown = [m.message for m in client.messages]
    assert shown == ["Optimizing saxpy on NVIDIA H200", HEADLINE], shown
    logged = [m.message for m in client.log_messages]
    assert "Optimizing saxpy" in logged and any(m.startswith("saxpy: ") and "best 1.27×" in m for m in logged)

    # The lens's Apply command, asked anyway, says why not and answers with the edit itself.
    applied = await client.workspace_execute_command_async(
        types.ExecuteCommandParams(command="cudaAgent.applyRewrite", arguments=[uri, "saxpy"])
    )
    assert applied["applied"] is False and "use the code action" in applied["reason"]
    assert [e["newText"] for e in applied["edit"]["changes"][uri]] == ["block = [256]\n"]
    await wait_until(lambda: len(client.messages) == 3, 10.0, "the answer to Apply")
    assert client.messages[2].type == types.MessageType.Error
    assert client.messages[2].message.startswith(
        "Apply verified rewrite of saxpy: this editor takes no edits"
    )

    # Then: Reject, as a command (Apply needs an edit this client cannot be sent).
    commands = await client.text_document_code_action_async(at(uri, saxpy_name()))
    assert [c.title for c in commands or []] == [
        "Reject suggestion",
        *(f"Reject suggestion: {reason}" for reason in REJECT_REASONS),  # one click with a reason
        "Optimize kernel: saxpy",
    ]
    assert await client.workspace_execute_command_async(
        types.ExecuteCommandParams(command=commands[0].command, arguments=commands[0].arguments)
    ) == {"rejected": True}

    def last_publish() -> types.PublishDiagnosticsParams:
        return [p for p in client.published if p.uri == uri][-1]  # type: ignore[attr-defined]

    await wait_until(
        lambda: not any(d.code == "verified-rewrite" for d in last_publish().diagnostics), 10.0, "no rewrite"
    )
    assert last_publish().version == 3

    # The server never sent it a request it had not declared.
    assert client.asked == []  # type: ignore[attr-defined]


async def test_a_client_that_never_answers_loses_nothing(silent: LanguageClient, tmp_path: Path):
    client = silent
    uri = (tmp_path / "elementwise.cu").as_uri()
    # workspace/configuration went out at `initialized` and is still unanswered: the session goes on.
    await wait_until(lambda: client.asked, 10.0, "the settings request")  # type: ignore[attr-defined]
    open_document(client, uri, ELEMENTWISE)
    await diagnostics_for(client, uri, 1)
    hover = await client.text_document_hover_async(
        types.HoverParams(text_document=types.TextDocumentIdentifier(uri=uri), position=saxpy_name())
    )
    assert hover is not None

    answer = await client.workspace_execute_command_async(
        types.ExecuteCommandParams(command="cudaAgent.optimize", arguments=[uri, "saxpy"])
    )
    assert answer["started"] is True
    # Its progress was never created: the job ran anyway, logged, and said how it ended.
    await diagnostics_for(
        client, uri, 1, lambda ds: any(d.message == HEADLINE for d in ds), JOB_TIMEOUT_S + REQUEST_TIMEOUT_S
    )
    await wait_until(lambda: any(m.message == HEADLINE for m in client.messages), JOB_TIMEOUT_S, "the end")
    assert any(m.message == "Optimizing saxpy" for m in client.log_messages)

    # Every request it got (settings, progress, a lens refresh after the result) was given up by the
    # server after its timeout, and cancelled.
    asked, given_up = client.asked, client.given_up  # type: ignore[attr-defined]

    def all_given_up() -> bool:
        return types.WORKSPACE_CODE_LENS_REFRESH in asked and len(given_up) == len(asked)

    await wait_until(all_given_up, 2 * REQUEST_TIMEOUT_S + 5, "every request given up")
    assert set(asked) == {
        types.WORKSPACE_CONFIGURATION,
        types.WINDOW_WORK_DONE_PROGRESS_CREATE,
        types.WORKSPACE_CODE_LENS_REFRESH,
    }
    assert sorted(method for method, _ in given_up) == sorted(asked)
    assert all(REQUEST_TIMEOUT_S - 0.5 < waited < REQUEST_TIMEOUT_S + 3 for _, waited in given_up), given_up
    # And the session still answers.
    assert await client.text_document_code_action_async(at(uri, saxpy_name()))


async def test_one_version_is_published_once_around_a_save(vscode: LanguageClient, tmp_path: Path):
    client = vscode
    uri = (tmp_path / "saved.cu").as_uri()
    open_document(client, uri, ELEMENTWISE)
    await diagnostics_for(client, uri, 1)
    client.text_document_did_save(
        types.DidSaveTextDocumentParams(text_document=types.TextDocumentIdentifier(uri=uri))
    )
    hover_params = types.HoverParams(
        text_document=types.TextDocumentIdentifier(uri=uri), position=saxpy_name()
    )

    async def compiled() -> bool:  # the hover shows the compile's registers once the save's compile is in
        hover = await client.text_document_hover_async(hover_params)
        return hover is not None and "registers" in str(hover.contents)

    for _ in range(600):
        if await compiled():
            break
        await asyncio.sleep(0.05)
    assert await compiled(), "the save's compile never finished"
    await client.text_document_hover_async(hover_params)  # a round trip: any publish sent has arrived
    versions = [p for p in client.published if p.uri == uri and p.version == 1]  # type: ignore[attr-defined]
    bodies = [list(p.diagnostics) for p in versions]
    assert all(a != b for i, a in enumerate(bodies) for b in bodies[i + 1 :]), bodies


async def test_the_settings_are_asked_for_once_at_start_up(vscode: LanguageClient, tmp_path: Path):
    client = vscode
    # What editors do right after `initialized` (Neovim with its settings, VS Code with none).
    client.workspace_did_change_configuration(types.DidChangeConfigurationParams(settings=None))
    await asyncio.sleep(1.0)
    asked = client.asked  # type: ignore[attr-defined]
    assert asked.count(types.WORKSPACE_CONFIGURATION) == 1, asked
    # A later change is read again.
    client.workspace_did_change_configuration(types.DidChangeConfigurationParams(settings=None))
    await wait_until(lambda: asked.count(types.WORKSPACE_CONFIGURATION) == 2, 10.0, "the settings read again")
