"""Optimization jobs end to end: the real server over stdio, with the GPU worker replaced by a recording
(CUDA_AGENT_RECORDED_WORKER, the only stand-in: the engine, search, compiler and LSP layers are real).

The recording holds what the H200 measured for examples/elementwise.cu: saxpy with block 256 runs
0.0832 ms → 0.0653 ms; every other launch of saxpy measures like the original.
"""

from __future__ import annotations

import json
import tempfile
from pathlib import Path
from typing import Any

import pytest_lsp
from cuda_agent.agent.feedback import REJECT_REASONS
from cuda_agent.agent.targets import load_targets
from lsprotocol import types
from pytest_lsp import ClientServerConfig, LanguageClient, client_capabilities

from tests.server_support import (
    SERVE,
    SERVER_ENV,
    apply_text_edits,
    diagnostics_for,
    edits_for,
    make_recording_client,
    open_document,
    replace_text,
    wait_until,
)

ROOT = Path(__file__).parent.parent
ELEMENTWISE = (ROOT / "examples" / "elementwise.cu").read_text()
RECORDING = Path(__file__).parent / "recordings" / "elementwise_h200.json"
REWRITE = "verified-rewrite"
HEADLINE = "saxpy: verified rewrite 1.27× faster (0.083 ms → 0.065 ms, NVIDIA H200, 5 input sets, 2 sizes)"
JOB_TIMEOUT_S = 60.0  # compiling ~13 candidates with NVRTC takes about a second; a slow CI box more


def make_client() -> LanguageClient:
    """The recording client, also keeping every `cudaAgent/result` notification."""
    client = make_recording_client()
    results: list[Any] = []

    @client.feature("cudaAgent/result")
    def on_result(params: Any) -> None:
        results.append(params)

    client.results = results  # type: ignore[attr-defined]
    statuses: list[Any] = []

    @client.feature("cudaAgent/status")
    def on_status(params: Any) -> None:
        statuses.append(params)

    client.statuses = statuses  # type: ignore[attr-defined]
    return client


@pytest_lsp.fixture(
    config=ClientServerConfig(
        server_command=SERVE,
        server_env={
            **SERVER_ENV,
            "CUDA_AGENT_RECORDED_WORKER": str(RECORDING),
            "CUDA_AGENT_CACHE_DIR": tempfile.mkdtemp(prefix="cuda-agent-jobs-cache-"),
        },
        client_factory=make_client,
    )
)
async def client(lsp_client: LanguageClient):
    await lsp_client.initialize_session(
        types.InitializeParams(capabilities=client_capabilities("visual-studio-code"))
    )
    yield
    await lsp_client.shutdown_session()


def slow_recording() -> Path:
    """The same recording with every verify and time answer taking 0.5 s, as a GPU's runs would: saxpy's
    job then holds the GPU for seconds, not the one second compiling takes (a race on a slow box)."""
    data = json.loads(RECORDING.read_text())
    data["kernels"]["saxpy"]["run_s"] = 0.5
    path = Path(tempfile.mkdtemp(prefix="cuda-agent-slow-recording-")) / "elementwise_h200_slow.json"
    path.write_text(json.dumps(data))
    return path


@pytest_lsp.fixture(
    config=ClientServerConfig(
        server_command=SERVE,
        server_env={
            **SERVER_ENV,
            "CUDA_AGENT_RECORDED_WORKER": str(slow_recording()),
            "CUDA_AGENT_CACHE_DIR": tempfile.mkdtemp(prefix="cuda-agent-jobs-cache-"),
        },
        client_factory=make_client,
    )
)
async def slow_client(lsp_client: LanguageClient):
    await lsp_client.initialize_session(
        types.InitializeParams(capabilities=client_capabilities("visual-studio-code"))
    )
    yield
    await lsp_client.shutdown_session()


def saxpy_name(text: str) -> types.Range:
    line = next(i for i, t in enumerate(text.split("\n")) if "void saxpy(" in t)
    column = text.split("\n")[line].index("saxpy")
    return types.Range(
        start=types.Position(line=line, character=column),
        end=types.Position(line=line, character=column + len("saxpy")),
    )


def is_rewrite(diagnostic: types.Diagnostic) -> bool:
    return diagnostic.code == REWRITE


async def open_and_optimize(
    client: LanguageClient, tmp_path: Path, name: str, text: str = ELEMENTWISE
) -> str:
    path = tmp_path / name
    path.write_text(text)
    uri = path.as_uri()
    open_document(client, uri, text)
    await diagnostics_for(client, uri, 1)
    answer = await client.workspace_execute_command_async(
        types.ExecuteCommandParams(command="cudaAgent.optimize", arguments=[uri, "saxpy"])
    )
    assert answer["started"] is True, answer
    return uri


async def rewrite_actions(client: LanguageClient, uri: str, diagnostics: list[types.Diagnostic]):
    found = await client.text_document_code_action_async(
        types.CodeActionParams(
            text_document=types.TextDocumentIdentifier(uri=uri),
            range=saxpy_name(ELEMENTWISE),
            context=types.CodeActionContext(
                diagnostics=diagnostics, only=[types.CodeActionKind.RefactorRewrite]
            ),
        )
    )
    # lsprotocol's client-side hook reads any action that has a `command` as a Command (it was sent as a
    # CodeAction with kind and diagnostics): both have the title this checks.
    return list(found or [])


def publishes(client: LanguageClient, uri: str) -> list[types.PublishDiagnosticsParams]:
    return [p for p in client.published if p.uri == uri]  # type: ignore[attr-defined]


async def test_optimize_shows_a_verified_rewrite_that_applies(client: LanguageClient, tmp_path: Path):
    uri = await open_and_optimize(client, tmp_path, "elementwise.cu")

    diagnostics = await diagnostics_for(client, uri, 1, lambda ds: any(map(is_rewrite, ds)), JOB_TIMEOUT_S)
    rewrite = next(d for d in diagnostics if is_rewrite(d))
    assert rewrite.message == HEADLINE
    assert rewrite.severity == types.DiagnosticSeverity.Information
    assert rewrite.range == saxpy_name(ELEMENTWISE)
    assert rewrite.data["uri"] == uri and rewrite.data["version"] == 1 and rewrite.data["kernel"] == "saxpy"

    # Progress was reported: begin, reports with the kernel and the best speedup, end (the rewrite was shown
    # as the search's best so far, before the search ended).
    reports = next(iter(client.progress_reports.values()))
    await wait_until(lambda: isinstance(reports[-1], types.WorkDoneProgressEnd), JOB_TIMEOUT_S, "the end")
    assert isinstance(reports[0], types.WorkDoneProgressBegin) and reports[0].cancellable
    messages = [r.message for r in reports if isinstance(r, types.WorkDoneProgressReport)]
    assert any(m and m.startswith("saxpy: ") and "best 1.27×" in m for m in messages), messages
    assert isinstance(reports[-1], types.WorkDoneProgressEnd)

    # The full result came as a custom notification: first as the best so far while the search went on,
    # then as the search's final result, then again once the spec's PyTorch oracle was timed (the
    # recording has no PyTorch numbers: the update says so).
    await wait_until(lambda: len(client.results) >= 3, 10.0, "cudaAgent/result three times")  # type: ignore[attr-defined]
    so_far, result, timed = client.results[:3]  # type: ignore[attr-defined]
    assert so_far.searching and not result.searching and not timed.searching
    assert so_far.rewrite.candidate_id == result.rewrite.candidate_id and so_far.version == 1
    assert result.kernel == "saxpy" and result.version == 1 and result.gpu == "NVIDIA H200"
    assert abs(result.rewrite.speedup - 0.0832 / 0.0653) < 1e-9 and result.torch_note == ""
    assert timed.kernel == "saxpy" and timed.rewrite.candidate_id == result.rewrite.candidate_id
    assert timed.torch_compile is None and timed.torch_note == "PyTorch timings are not part of the recording"

    # The GPU was announced once, as soon as it was known (the extension's status bar shows it).
    assert [(s.gpu, s.available) for s in client.statuses] == [("NVIDIA H200", True)]  # type: ignore[attr-defined]

    # Lens and hover answer from the result; the client was asked to fetch the lenses again.
    assert client.lens_refreshes  # type: ignore[attr-defined]
    lenses = await client.text_document_code_lens_async(
        types.CodeLensParams(text_document=types.TextDocumentIdentifier(uri=uri))
    )
    titles = [lens.command.title for lens in lenses if lens.command]
    assert titles[-3:] == ["⚡ 1.27× verified", "Apply", "Reject"], titles
    hover = await client.text_document_hover_async(
        types.HoverParams(
            text_document=types.TextDocumentIdentifier(uri=uri), position=saxpy_name(ELEMENTWISE).start
        )
    )
    assert hover is not None and isinstance(hover.contents, types.MarkupContent)
    assert "| original | 0.0832 ms" in hover.contents.value and "1.27×" in hover.contents.value

    # Apply carries no edit until resolved; resolving gives an annotated whole-file edit.
    actions = await rewrite_actions(client, uri, [rewrite])
    assert [a.title for a in actions] == [
        "Apply verified rewrite: 1.27× faster",
        "Reject suggestion",
        *(f"Reject suggestion: {reason}" for reason in REJECT_REASONS),  # one click with a reason
    ]
    apply = actions[0]
    assert isinstance(apply, types.CodeAction)
    assert apply.edit is None and apply.data == rewrite.data and list(apply.diagnostics or []) == [rewrite]
    resolved = await client.code_action_resolve_async(apply)
    assert resolved.edit is not None and resolved.edit.change_annotations
    annotation = next(iter(resolved.edit.change_annotations.values()))
    assert annotation.needs_confirmation and "1.27×" in annotation.label
    # Only the lines that differ are edited (a preview shows them, not the whole file replaced).
    (change,) = edits_for(resolved.edit, uri)
    block_line = ELEMENTWISE.split("\n").index("block = [128]")
    assert (change.range.start.line, change.range.end.line) == (block_line, block_line + 1)
    assert change.new_text == "block = [256]\n"
    edited = apply_text_edits(ELEMENTWISE, [change])
    saxpy = load_targets(Path("elementwise.cu"), edited).find("saxpy")
    assert saxpy is not None and saxpy.spec is not None and saxpy.spec.launch.block == (256,)

    # The applied text is new text: the suggestion is gone, and the old action no longer resolves.
    replace_text(client, uri, edited, version=2)
    assert not [d for d in await diagnostics_for(client, uri, 2) if is_rewrite(d)]
    assert await rewrite_actions(client, uri, []) == []
    stale = await client.code_action_resolve_async(apply)
    assert stale.edit is None and stale.disabled is not None


async def test_an_edit_during_the_job_leaves_no_stale_suggestion(client: LanguageClient, tmp_path: Path):
    uri = await open_and_optimize(client, tmp_path, "racing.cu")
    changed = ELEMENTWISE.replace("// Element-wise kernels", "// Edited element-wise kernels")
    replace_text(client, uri, changed, version=2)
    await diagnostics_for(client, uri, 2)

    # Wait for the job to end either way: cancelled by the edit, or finished just before it.
    def ended() -> bool:
        return any(
            isinstance(reports[-1], types.WorkDoneProgressEnd) for reports in client.progress_reports.values()
        )

    await wait_until(ended, JOB_TIMEOUT_S, "the job's progress to end")
    await diagnostics_for(client, uri, 2)  # a round trip: anything the job sent has arrived
    after = publishes(client, uri)
    after = after[next(i for i, p in enumerate(after) if p.version == 2) :]
    assert {p.version for p in after} == {2}
    assert not any(is_rewrite(d) for p in after for d in p.diagnostics)
    assert await rewrite_actions(client, uri, []) == []


async def test_an_edit_drops_the_queued_jobs_of_the_old_text(slow_client: LanguageClient, tmp_path: Path):
    """A save of a big file queues a job for every kernel: after an edit none of them may start (each
    would flash a progress bar, for a result that could never be shown)."""
    client = slow_client
    uri = await open_and_optimize(client, tmp_path, "queued.cu")  # saxpy holds the GPU for seconds
    optimize_relu = types.ExecuteCommandParams(command="cudaAgent.optimize", arguments=[uri, "relu"])
    assert (await client.workspace_execute_command_async(optimize_relu))["started"] is True
    replace_text(client, uri, ELEMENTWISE.replace("// Element-wise", "// Edited element-wise"), version=2)

    cancel = types.ExecuteCommandParams(command="cudaAgent.cancelOptimization", arguments=[uri, "relu"])
    assert await client.workspace_execute_command_async(cancel) == {"cancelled": False}  # already gone
    await wait_until(
        lambda: all(isinstance(r[-1], types.WorkDoneProgressEnd) for r in client.progress_reports.values()),
        JOB_TIMEOUT_S,
        "saxpy's job to end",
    )
    await diagnostics_for(client, uri, 2)  # a round trip: a job started after saxpy's would have begun
    assert len(client.progress_reports) == 1  # saxpy's only


async def test_reject_removes_the_suggestion(client: LanguageClient, tmp_path: Path):
    uri = await open_and_optimize(client, tmp_path, "reject.cu")
    await diagnostics_for(client, uri, 1, lambda ds: any(map(is_rewrite, ds)), JOB_TIMEOUT_S)
    count = len(publishes(client, uri))

    answer = await client.workspace_execute_command_async(
        types.ExecuteCommandParams(command="cudaAgent.rejectRewrite", arguments=[uri, "saxpy"])
    )
    assert answer == {"rejected": True}
    await wait_until(lambda: len(publishes(client, uri)) > count, 10.0, "a publish after reject")
    assert not any(is_rewrite(d) for d in publishes(client, uri)[-1].diagnostics)
    assert await rewrite_actions(client, uri, []) == []


async def test_a_reopened_file_shows_its_last_result_at_once(client: LanguageClient, tmp_path: Path):
    uri = await open_and_optimize(client, tmp_path, "reopen.cu")
    results = client.results  # type: ignore[attr-defined]
    await wait_until(lambda: any(not r.searching for r in results), JOB_TIMEOUT_S, "the search's result")
    client.text_document_did_close(
        types.DidCloseTextDocumentParams(text_document=types.TextDocumentIdentifier(uri=uri))
    )
    jobs = len(client.progress_reports)

    open_document(client, uri, ELEMENTWISE, version=7)  # the same text, as a new document version
    diagnostics = await diagnostics_for(client, uri, 7, lambda ds: any(map(is_rewrite, ds)), 10.0)
    rewrite = next(d for d in diagnostics if is_rewrite(d))
    assert rewrite.message == HEADLINE and rewrite.data["version"] == 7
    assert len(client.progress_reports) == jobs  # from the store, not a new search
    await wait_until(lambda: any(r.version == 7 for r in results), 10.0, "the kept result, sent again")
    actions = await rewrite_actions(client, uri, [rewrite])
    assert actions[0].title == "Apply verified rewrite: 1.27× faster"

    # Other text is not that result's: a changed file opens with no suggestion.
    client.text_document_did_close(
        types.DidCloseTextDocumentParams(text_document=types.TextDocumentIdentifier(uri=uri))
    )
    open_document(client, uri, ELEMENTWISE.replace("// Element-wise", "// Other"), version=8)
    assert not [d for d in await diagnostics_for(client, uri, 8) if is_rewrite(d)]


async def test_cancel_stops_a_queued_job_and_says_when_there_is_none(client: LanguageClient, tmp_path: Path):
    uri = await open_and_optimize(client, tmp_path, "cancel.cu")  # saxpy holds the GPU
    queued = await client.workspace_execute_command_async(
        types.ExecuteCommandParams(command="cudaAgent.optimize", arguments=[uri, "relu"])
    )
    assert queued["started"] is True, queued
    cancel = types.ExecuteCommandParams(command="cudaAgent.cancelOptimization", arguments=[uri, "relu"])
    assert await client.workspace_execute_command_async(cancel) == {"cancelled": True}
    results = client.results  # type: ignore[attr-defined]
    await wait_until(lambda: any(r.kernel == "saxpy" and not r.searching for r in results), JOB_TIMEOUT_S)
    await diagnostics_for(client, uri, 1)  # a round trip: anything relu's job would have sent has arrived
    assert {r.kernel for r in results} == {"saxpy"}
    assert await client.workspace_execute_command_async(cancel) == {"cancelled": False}


async def test_a_running_search_is_offered_to_cancel_among_the_code_actions(
    slow_client: LanguageClient, tmp_path: Path
):
    """Clients without a cancellable progress (eglot, ALE) stop a search from the code-action menu."""
    client = slow_client
    uri = await open_and_optimize(client, tmp_path, "stop.cu")  # saxpy holds the GPU for seconds
    where = types.CodeActionParams(
        text_document=types.TextDocumentIdentifier(uri=uri),
        range=saxpy_name(ELEMENTWISE),
        context=types.CodeActionContext(diagnostics=[], only=[types.CodeActionKind.Refactor]),
    )
    (cancel,) = await client.text_document_code_action_async(where) or []
    # (lsprotocol's client reads an action with a command as a Command: its title is what this checks.)
    assert cancel.title == "Cancel optimization: saxpy"
    answer = await client.workspace_execute_command_async(
        types.ExecuteCommandParams(command="cudaAgent.cancelOptimization", arguments=[uri, "saxpy"])
    )
    assert answer == {"cancelled": True}
    await wait_until(
        lambda: any(m.message == "Stopping the optimization of saxpy" for m in client.messages),
        10.0,
        "the answer",
    )
    reports = next(iter(client.progress_reports.values()))
    await wait_until(lambda: isinstance(reports[-1], types.WorkDoneProgressEnd), JOB_TIMEOUT_S, "the end")
    assert reports[-1].message == "saxpy: stopped"
    (again,) = await client.text_document_code_action_async(where) or []
    assert again.title == "Optimize kernel: saxpy"
