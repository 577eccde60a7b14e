"""Shared pieces of the language-server tests (no tests here): a client that records every diagnostics
notification with its version, waiting without sleeping blindly, and applying a WorkspaceEdit the way
an editor would, and the rule for a real editor that is not installed."""

from __future__ import annotations

import asyncio
import os
import re
import sys
import tempfile
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest
from cuda_agent.agent.spec import render_spec
from cuda_agent.agent.targets import load_targets
from lsprotocol import types
from pytest_lsp import LanguageClient
from pytest_lsp.client import make_test_lsp_client

SERVE = [sys.executable, "-m", "cuda_agent", "serve"]
# Results caches and the feedback log go to scratch directories, never the user's.
SERVER_ENV = {
    **os.environ,
    "CUDA_AGENT_CACHE_DIR": str(Path(tempfile.gettempdir()) / "cuda-agent-test-cache"),
    # A session without a workspace logs feedback to the user data dir: a scratch one in tests.
    "XDG_DATA_HOME": str(Path(tempfile.gettempdir()) / "cuda-agent-test-data"),
}


class RecordingClient(LanguageClient):
    published: list[types.PublishDiagnosticsParams]


def make_recording_client() -> LanguageClient:
    """pytest-lsp's client, also keeping every publishDiagnostics in order (its own keeps the last only,
    without the version, and the tests are about versions)."""
    client = make_test_lsp_client()
    published: list[types.PublishDiagnosticsParams] = []
    original = client.protocol.fm.features[types.TEXT_DOCUMENT_PUBLISH_DIAGNOSTICS]

    def record(params: types.PublishDiagnosticsParams) -> Any:
        published.append(params)
        return original(params)

    client.protocol.fm.features[types.TEXT_DOCUMENT_PUBLISH_DIAGNOSTICS] = record
    client.published = published  # type: ignore[attr-defined]

    # The capabilities the tests claim (VS Code's) include refreshing code lenses when the server asks.
    refreshes: list[None] = []

    @client.feature(types.WORKSPACE_CODE_LENS_REFRESH)
    def refresh_lenses(params: None) -> None:
        refreshes.append(params)

    client.lens_refreshes = refreshes  # type: ignore[attr-defined]
    return client


async def wait_until(condition: Callable[[], Any], timeout_s: float = 20.0, what: str = "condition") -> Any:
    deadline = asyncio.get_running_loop().time() + timeout_s
    while True:
        value = condition()
        if value:
            return value
        if asyncio.get_running_loop().time() > deadline:
            raise AssertionError(f"timed out waiting for {what}")
        await asyncio.sleep(0.02)


async def diagnostics_for(
    client: LanguageClient,
    uri: str,
    version: int,
    accept: Callable[[list[types.Diagnostic]], bool] = lambda _: True,
    timeout_s: float = 20.0,
) -> list[types.Diagnostic]:
    """The diagnostics of the first publish for `uri` at `version` that `accept`s."""

    def found() -> list[types.Diagnostic] | None:
        for params in client.published:  # type: ignore[attr-defined]
            if params.uri == uri and params.version == version and accept(list(params.diagnostics)):
                return list(params.diagnostics) or [types.Diagnostic(range=_ZERO, message="<none>")]
        return None

    diagnostics = await wait_until(found, timeout_s, f"diagnostics for {uri} v{version}")
    return [d for d in diagnostics if d.message != "<none>"]


_ZERO = types.Range(start=types.Position(line=0, character=0), end=types.Position(line=0, character=0))


def open_document(client: LanguageClient, uri: str, text: str, version: int = 1) -> None:
    client.text_document_did_open(
        types.DidOpenTextDocumentParams(
            text_document=types.TextDocumentItem(uri=uri, language_id="cuda", version=version, text=text)
        )
    )


def replace_text(client: LanguageClient, uri: str, text: str, version: int) -> None:
    client.text_document_did_change(
        types.DidChangeTextDocumentParams(
            text_document=types.VersionedTextDocumentIdentifier(uri=uri, version=version),
            content_changes=[types.TextDocumentContentChangeWholeDocument(text=text)],
        )
    )


def change_text(
    client: LanguageClient, uri: str, text: str, start: int, end: int, new: str, version: int
) -> str:
    """Replace text[start:end] with an incremental change, positioned as an editor does (lines end at
    \\n, \\r\\n or \\r; characters are UTF-16 units); the new text."""
    client.text_document_did_change(
        types.DidChangeTextDocumentParams(
            text_document=types.VersionedTextDocumentIdentifier(uri=uri, version=version),
            content_changes=[
                types.TextDocumentContentChangePartial(
                    range=types.Range(position_of(text, start), position_of(text, end)), text=new
                )
            ],
        )
    )
    return text[:start] + new + text[end:]


def position_of(text: str, index: int) -> types.Position:
    before = text[:index]
    ends = list(re.finditer(r"\r\n|\r|\n", before))
    start = ends[-1].end() if ends else 0
    return types.Position(line=len(ends), character=len(before[start:].encode("utf-16-le")) // 2)


def offset_of(text: str, position: types.Position) -> int:
    """The string index of an LSP position (UTF-16 units) in `text`."""
    lines = text.split("\n")
    line = min(position.line, len(lines) - 1)
    start = sum(len(x) + 1 for x in lines[:line])
    units, index = 0, 0
    for index, char in enumerate(lines[line]):
        if units >= position.character:
            return start + index
        units += 2 if ord(char) > 0xFFFF else 1
    return start + len(lines[line])


Edit = types.TextEdit | types.AnnotatedTextEdit


def apply_text_edits(text: str, edits: list[Edit]) -> str:
    for edit in sorted(edits, key=lambda e: (e.range.start.line, e.range.start.character), reverse=True):
        start, end = offset_of(text, edit.range.start), offset_of(text, edit.range.end)
        text = text[:start] + edit.new_text + text[end:]
    return text


def edits_for(edit: types.WorkspaceEdit, uri: str) -> list[Edit]:
    """The text edits for `uri`, annotated ones included (an editor applies those after confirmation)."""
    found: list[Edit] = []
    for change in edit.document_changes or []:
        if isinstance(change, types.TextDocumentEdit) and change.text_document.uri == uri:
            found += [e for e in change.edits if isinstance(e, (types.TextEdit, types.AnnotatedTextEdit))]
    found += list((edit.changes or {}).get(uri, []))
    return found


def editor_missing(reason: str, setup: str) -> None:
    """Skip a real-editor test, saying what is missing and how to install it; where CI requires the
    editors (CUDA_AGENT_E2E_REQUIRED=1, set by .ci/run) fail instead."""
    message = f"{reason} ({setup})"
    if os.environ.get("CUDA_AGENT_E2E_REQUIRED") == "1":
        pytest.fail(f"CUDA_AGENT_E2E_REQUIRED=1 but {message}")
    pytest.skip(message)


def spec_and_rewrite_applied(original: str) -> str:
    """examples/elementwise.cu after the editor tests' two edits: the quick fix wrote relu's inferred spec
    above it, and the verified rewrite launches saxpy in blocks of 256."""
    relu = load_targets(Path("elementwise.cu"), original).find("relu")
    assert relu is not None and relu.spec is not None and relu.spec.inferred
    spec = render_spec(relu.spec) + "\n"
    return original.replace("block = [128]", "block = [256]").replace(
        "__global__ void relu", spec + "__global__ void relu"
    )
