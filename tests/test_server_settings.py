"""Settings and triggers: the cudaAgent settings read field by field (CPU), and end to end over stdio with
the recorded GPU worker: a save optimizes every kernel with the one under the cursor first, "manual" waits
for the command, settings come from workspace/configuration and bad ones are reported by name."""

from __future__ import annotations

import asyncio
import re
import tempfile
from pathlib import Path
from typing import Any

import pytest
import pytest_lsp
from cuda_agent.server.settings import ServerSettings, read_settings
from lsprotocol import types
from pytest_lsp import ClientServerConfig, LanguageClient, client_capabilities

from tests.server_support import SERVE, SERVER_ENV, diagnostics_for, open_document, replace_text, wait_until
from tests.test_server_jobs import ELEMENTWISE, JOB_TIMEOUT_S, RECORDING, is_rewrite, make_client

# -- reading -------------------------------------------------------------------------------------------


def test_settings_are_read_field_by_field_and_bad_values_keep_the_previous_one() -> None:
    settings, problems = read_settings(
        {"trigger": "idle", "searchBudgetSeconds": 30, "proposers": ["vectorize", "launch-config"]},
        ServerSettings(),
    )
    assert (settings.trigger, settings.search_budget_s) == ("idle", 30.0)
    assert settings.proposers == ("vectorize", "launch-config") and problems == []

    again, problems = read_settings(
        {
            "trigger": "often",
            "gpuIndex": -1,
            "feedback": "yes",
            "colour": 3,
            "token": "secret",
            "idleSeconds": None,
        },
        settings,
    )
    assert again == settings  # nothing valid in it: every previous value kept
    assert problems == [
        "cudaAgent.trigger: expected one of save, idle, manual, got 'often'; keeping 'idle'",
        "cudaAgent.gpuIndex: expected a GPU index (0, 1, …), got -1; keeping 0",
        "cudaAgent.feedback: expected true or false, got 'yes'; keeping True",
        "cudaAgent.colour: not a setting (settings: trigger, idleSeconds, gpuIndex, searchBudgetSeconds, "
        "proposers, feedback, sanitize, includeDirs, defines, nvccFlags)",
    ]
    _, problems = read_settings({"proposers": ["warp-magic"]}, settings)
    assert problems[0].startswith("cudaAgent.proposers: unknown proposer 'warp-magic' (known: ")
    assert read_settings("fast", settings) == (
        settings,
        ["cudaAgent: expected an object of settings, got str"],
    )


def test_the_sanitizer_setting_is_on_by_default_and_read_as_a_flag() -> None:
    assert ServerSettings().sanitize is True
    off, problems = read_settings({"sanitize": False}, ServerSettings())
    assert off.sanitize is False and problems == []
    kept, problems = read_settings({"sanitize": "no"}, off)
    assert kept.sanitize is False
    assert problems == ["cudaAgent.sanitize: expected true or false, got 'no'; keeping False"]
    assert read_settings({"sanitize": None}, off)[0].sanitize is False  # VS Code's unset keeps the value


# -- end to end ----------------------------------------------------------------------------------------


def _config(**env: str) -> ClientServerConfig:
    return ClientServerConfig(
        server_command=SERVE,
        server_env={
            **SERVER_ENV,
            "CUDA_AGENT_RECORDED_WORKER": str(RECORDING),
            "CUDA_AGENT_CACHE_DIR": tempfile.mkdtemp(prefix="cuda-agent-settings-cache-"),
            **env,
        },
        client_factory=make_client,
    )


async def _start(client: LanguageClient, options: Any = None, configuration: Any = None) -> None:
    if configuration is not None:
        client.set_configuration(configuration, section="cudaAgent")
    await client.initialize_session(
        types.InitializeParams(
            capabilities=client_capabilities("visual-studio-code"), initialization_options=options
        )
    )


def _save(client: LanguageClient, uri: str) -> None:
    client.text_document_did_save(
        types.DidSaveTextDocumentParams(text_document=types.TextDocumentIdentifier(uri=uri))
    )


def _line_of(text: str, needle: str) -> int:
    return next(i for i, line in enumerate(text.split("\n")) if needle in line)


async def _cursor_at(client: LanguageClient, uri: str, line: int) -> None:
    """Where an editor would ask for code actions as the cursor arrives on the line."""
    at = types.Position(line=line, character=4)
    await client.text_document_code_action_async(
        types.CodeActionParams(
            text_document=types.TextDocumentIdentifier(uri=uri),
            range=types.Range(start=at, end=at),
            context=types.CodeActionContext(diagnostics=[]),
        )
    )


@pytest_lsp.fixture(config=_config())
async def default_client(lsp_client: LanguageClient):
    yield
    await lsp_client.shutdown_session()


# A second kernel with a written spec after saxpy (the recording does not know it: its job ends with the
# worker's refusal, which is a result too). relu, before both, has only an inferred spec.
TWO_SPECS = (
    ELEMENTWISE + "\n" + ELEMENTWISE[ELEMENTWISE.index("/* cuda-agent") :].replace("saxpy", "late_axpy")
)


@pytest.mark.parametrize("first", ["late_axpy", "saxpy"])
async def test_a_save_optimizes_the_kernels_with_specs_the_one_under_the_cursor_first(
    default_client: LanguageClient, tmp_path: Path, first: str
) -> None:
    client = default_client
    await _start(client)
    uri = (tmp_path / f"cursor_{first}.cu").as_uri()
    text = f"// cursor on {first}\n{TWO_SPECS}"  # a text of its own: results are kept per text
    open_document(client, uri, text)
    await diagnostics_for(client, uri, 1)
    await _cursor_at(client, uri, _line_of(text, f"void {first}(") + 2)
    _save(client, uri)  # no command: the default trigger is the save

    results = client.results  # type: ignore[attr-defined]

    def kernels() -> list[str]:  # in the order of their first result (a result may be updated later)
        return list(dict.fromkeys(r.kernel for r in results))

    await wait_until(lambda: len(kernels()) >= 2, JOB_TIMEOUT_S, "a result for both kernels")
    assert kernels() == [first, "saxpy" if first == "late_axpy" else "late_axpy"]
    assert await diagnostics_for(client, uri, 1, lambda ds: any(map(is_rewrite, ds)), JOB_TIMEOUT_S)
    # relu's spec is only inferred and the cursor was elsewhere: the save did not queue it.
    answer = await client.workspace_execute_command_async(
        types.ExecuteCommandParams(command="cudaAgent.optimize", arguments=[uri, "relu"])
    )
    assert answer["reason"] == "Optimizing relu on NVIDIA H200"


@pytest_lsp.fixture(config=_config())
async def configured_client(lsp_client: LanguageClient):
    yield
    await lsp_client.shutdown_session()


async def test_manual_trigger_from_workspace_configuration_waits_for_the_command(
    configured_client: LanguageClient, tmp_path: Path
) -> None:
    client = configured_client
    await _start(client, configuration={"trigger": "manual", "searchBudgetSeconds": "fast"})
    await wait_until(lambda: client.messages, 10.0, "a message about the bad setting")
    assert client.messages[0].message == (
        "cudaAgent.searchBudgetSeconds: expected a number of seconds, got 'fast'; keeping 120.0"
    )

    uri = (tmp_path / "manual.cu").as_uri()
    open_document(client, uri, ELEMENTWISE)
    await diagnostics_for(client, uri, 1)
    _save(client, uri)
    # The save's compile is published (resources in hover), and no job starts: no progress, no result.
    saxpy = types.Position(line=_line_of(ELEMENTWISE, "void saxpy("), character=17)
    await _compiled(client, uri, saxpy)
    assert not client.progress_reports and not client.results  # type: ignore[attr-defined]

    answer = await client.workspace_execute_command_async(
        types.ExecuteCommandParams(command="cudaAgent.optimize", arguments=[uri, "saxpy"])
    )
    assert answer["started"] is True
    await wait_until(lambda: client.results, JOB_TIMEOUT_S, "the asked-for result")  # type: ignore[attr-defined]
    assert {r.kernel for r in client.results} == {"saxpy"}  # type: ignore[attr-defined]


async def _compiled(client: LanguageClient, uri: str, position: types.Position) -> None:
    """Until hover shows the kernel's registers: the save's compile has been published."""
    params = types.HoverParams(text_document=types.TextDocumentIdentifier(uri=uri), position=position)
    for _ in range(200):
        hover = await client.text_document_hover_async(params)
        if hover is not None and "registers" in str(hover.contents):
            return
        await asyncio.sleep(0.1)
    raise AssertionError("the save's compile never showed in hover")


@pytest_lsp.fixture(config=_config())
async def idle_client(lsp_client: LanguageClient):
    yield
    await lsp_client.shutdown_session()


async def test_idle_trigger_from_initialization_options_optimizes_after_the_edits_settle(
    idle_client: LanguageClient, tmp_path: Path
) -> None:
    client = idle_client
    await _start(client, options={"trigger": "idle", "idleSeconds": 0.3, "proposers": ["launch-config"]})
    uri = (tmp_path / "idle.cu").as_uri()
    open_document(client, uri, ELEMENTWISE)
    edited = ELEMENTWISE.replace("// Element-wise kernels", "// Element-wise kernels, edited")
    replace_text(client, uri, edited, version=2)  # never saved
    results = client.results  # type: ignore[attr-defined]
    # The best so far may come first; then the search's final result.
    await wait_until(lambda: any(not r.searching for r in results), JOB_TIMEOUT_S, "a result after idle")
    assert {(r.kernel, r.version) for r in results} == {("saxpy", 2)}  # relu's spec is only inferred
    # Only the proposer the settings allow ran.
    saxpy = next(r for r in results if r.kernel == "saxpy" and not r.searching)
    assert saxpy.candidates and {c.proposer for c in saxpy.candidates} == {"launch-config"}


@pytest_lsp.fixture(config=_config())
async def restrict_client(lsp_client: LanguageClient):
    yield
    await lsp_client.shutdown_session()


async def test_a_kernel_searched_without_gain_shows_its_measured_time_in_the_lens_and_hover(
    restrict_client: LanguageClient, tmp_path: Path
) -> None:
    client = restrict_client
    # Only __restrict__: the recording measures it like the original, so nothing is faster.
    await _start(client, options={"proposers": ["restrict"]})
    uri = (tmp_path / "measured.cu").as_uri()
    open_document(client, uri, ELEMENTWISE)
    await diagnostics_for(client, uri, 1)
    _save(client, uri)
    await wait_until(lambda: client.results, JOB_TIMEOUT_S, "saxpy's result")  # type: ignore[attr-defined]
    assert client.results[0].rewrite is None  # type: ignore[attr-defined]
    lenses = await client.text_document_code_lens_async(
        types.CodeLensParams(text_document=types.TextDocumentIdentifier(uri=uri))
    )
    saxpy_line = _line_of(ELEMENTWISE, "void saxpy(")
    titles = [
        lens.command.title for lens in lenses if lens.command and lens.range.start.line >= saxpy_line - 20
    ]
    assert any(re.fullmatch(r"0\.0832 ms · \d+% of roofline · ▶ Optimize", t) for t in titles), titles
    # A client without code lenses (eglot, ALE) has the same numbers in the hover.
    name = ELEMENTWISE.split("\n")[saxpy_line].index("saxpy")
    hover = await client.text_document_hover_async(
        types.HoverParams(
            text_document=types.TextDocumentIdentifier(uri=uri),
            position=types.Position(line=saxpy_line, character=name),
        )
    )
    assert hover is not None and isinstance(hover.contents, types.MarkupContent)
    assert re.search(r"\| original \| 0\.0832 ms \|.*\| 1\.00× \| .* \| \d+% \|", hover.contents.value)
