"""The language server end to end: the real `cuda-agent serve` process over stdio, driven by pytest-lsp."""

from __future__ import annotations

import asyncio
from pathlib import Path

import pytest
import pytest_lsp
from cuda_agent.agent.targets import load_targets
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from lsprotocol import types
from pytest_lsp import ClientServerConfig, LanguageClient, client_capabilities

from tests.server_support import (
    SERVE,
    SERVER_ENV,
    apply_text_edits,
    change_text,
    diagnostics_for,
    edits_for,
    make_recording_client,
    open_document,
    replace_text,
    wait_until,
)

KERNELS = Path(__file__).parent / "kernels"
SCALE_ADD = (KERNELS / "original_scale_add.cu").read_text()

# Two kernels: one whose spec is inferred, one for which none can be (a pointer to pointers).
TWO_KERNELS = (
    SCALE_ADD
    + """
// Gathers through a table of row pointers: no spec can be inferred for that.
__global__ void gather_rows(float** rows, float* out, int n) {
    int i = blockIdx.x * blockDim.x + threadIdx.x;
    if (i < n) out[i] = rows[i][0];
}
"""
)

COMPILE_ERROR = """// line 0
__global__ void broken(float* y, int n) {
    int i = blockIdx.x * blockDim.x + threadIdx.x;
    if (i < n) y[i] = undefined_thing * 2.0f;
    int unused_var = 3;
}
"""


@pytest_lsp.fixture(
    config=ClientServerConfig(
        server_command=SERVE, server_env=SERVER_ENV, client_factory=make_recording_client
    )
)
async def client(lsp_client: LanguageClient):
    await lsp_client.initialize_session(
        types.InitializeParams(capabilities=client_capabilities("visual-studio-code"))
    )
    yield
    await lsp_client.shutdown_session()


@pytest_lsp.fixture(
    config=ClientServerConfig(
        server_command=SERVE, server_env=SERVER_ENV, client_factory=make_recording_client
    )
)
async def neovim(lsp_client: LanguageClient):
    result = await lsp_client.initialize_session(
        types.InitializeParams(capabilities=client_capabilities("neovim"))
    )
    lsp_client.initialized_with = result  # type: ignore[attr-defined]
    yield
    await lsp_client.shutdown_session()


def uri_of(tmp_path: Path, name: str) -> str:
    return (tmp_path / name).as_uri()


async def test_spec_error_is_reported_where_it_is_and_cleared_when_fixed(client: LanguageClient, tmp_path):
    written = load_targets(Path("x.cu"), SCALE_ADD).targets[0].spec
    from cuda_agent.agent.spec import render_spec

    good = render_spec(written).replace("# spec inferred", "# was inferred") + "\n" + SCALE_ADD
    # A wrong size name in a shape; a non-ASCII comment line above keeps the columns honest.
    bad = good.replace(
        'y = { role = "input", dtype = "float32", shape = ["n"] }',
        'y = { role = "input", dtype = "float32", shape = ["m"] }',
    )
    assert bad != good
    uri = uri_of(tmp_path, "spec.cu")
    open_document(client, uri, bad, version=1)

    diagnostics = await diagnostics_for(client, uri, 1)
    errors = [d for d in diagnostics if d.severity == types.DiagnosticSeverity.Error]
    assert len(errors) == 1, diagnostics
    line = next(i for i, text in enumerate(bad.split("\n")) if '["m"]' in text)
    column = bad.split("\n")[line].index('"m"') + 1  # the m inside the quotes
    assert "unknown size 'm'" in errors[0].message
    assert (errors[0].range.start.line, errors[0].range.start.character) == (line, column)

    replace_text(client, uri, good, version=2)
    assert await diagnostics_for(client, uri, 2) == []


async def test_compile_errors_arrive_on_save_on_their_line(client: LanguageClient, tmp_path):
    uri = uri_of(tmp_path, "broken.cu")
    open_document(client, uri, COMPILE_ERROR)
    await diagnostics_for(client, uri, 1)
    client.text_document_did_save(
        types.DidSaveTextDocumentParams(text_document=types.TextDocumentIdentifier(uri=uri))
    )
    diagnostics = await diagnostics_for(
        client, uri, 1, accept=lambda ds: any(d.severity == types.DiagnosticSeverity.Error for d in ds)
    )
    error = next(d for d in diagnostics if d.severity == types.DiagnosticSeverity.Error)
    assert 'identifier "undefined_thing" is undefined' in error.message
    assert error.range.start.line == 3
    assert error.range.start.character == COMPILE_ERROR.split("\n")[3].index("undefined_thing")
    warning = next(d for d in diagnostics if d.severity == types.DiagnosticSeverity.Warning)
    assert "unused_var" in warning.message and warning.range.start.line == 4


async def test_a_compile_for_old_text_is_never_published(client: LanguageClient, tmp_path):
    uri = uri_of(tmp_path, "racing.cu")
    open_document(client, uri, COMPILE_ERROR)
    await diagnostics_for(client, uri, 1)
    client.text_document_did_save(
        types.DidSaveTextDocumentParams(text_document=types.TextDocumentIdentifier(uri=uri))
    )
    replace_text(client, uri, COMPILE_ERROR.replace("undefined_thing", "(float)i"), version=2)
    assert await diagnostics_for(client, uri, 2) == []
    await asyncio.sleep(2.0)  # longer than the compile takes here (~0.5 s)
    versions = [p.version for p in client.published if p.uri == uri]  # type: ignore[attr-defined]
    assert versions[-1] == 2
    after = versions[versions.index(2) :]
    assert set(after) == {2}, versions


async def test_code_lens_above_each_kernel_and_a_note_without_spec(client: LanguageClient, tmp_path):
    uri = uri_of(tmp_path, "two.cu")
    open_document(client, uri, TWO_KERNELS)
    diagnostics = await diagnostics_for(client, uri, 1)
    notes = [d for d in diagnostics if d.severity == types.DiagnosticSeverity.Information]
    assert len(notes) == 1 and notes[0].message.startswith("gather_rows: no spec")
    lenses = await client.text_document_code_lens_async(
        types.CodeLensParams(text_document=types.TextDocumentIdentifier(uri=uri))
    )
    titles = [(lens.range.start.line, lens.command.title) for lens in lenses if lens.command]
    lines = TWO_KERNELS.split("\n")
    scale_line = next(i for i, t in enumerate(lines) if "void scale_add" in t)
    gather_line = next(i for i, t in enumerate(lines) if "void gather_rows" in t)
    assert titles == [
        (scale_line, "▶ Optimize"),
        (scale_line, "spec inferred · Add spec"),
        (gather_line, "▶ Optimize"),
    ]
    optimize = next(lens for lens in lenses if lens.command and lens.range.start.line == gather_line)
    assert optimize.command.command == "cudaAgent.optimize"
    assert list(optimize.command.arguments) == [uri, "gather_rows"]


async def rename_gather_rows(client: LanguageClient, uri: str, text: str) -> dict[str, int]:
    """Rename the kernel gather_rows to gather with an incremental change at its UTF-16 position, as an
    editor sends one; then each kernel the server's lenses name, and its line."""
    lines = text.split("\n")
    line = next(i for i, t in enumerate(lines) if "void gather_rows" in t)
    column = len(lines[line][: lines[line].index("gather_rows")].encode("utf-16-le")) // 2
    where = types.Range(types.Position(line, column), types.Position(line, column + len("gather_rows")))
    client.text_document_did_change(
        types.DidChangeTextDocumentParams(
            text_document=types.VersionedTextDocumentIdentifier(uri=uri, version=2),
            content_changes=[types.TextDocumentContentChangePartial(range=where, text="gather")],
        )
    )
    lenses = await client.text_document_code_lens_async(
        types.CodeLensParams(text_document=types.TextDocumentIdentifier(uri=uri))
    )
    return {lens.command.arguments[1]: lens.range.start.line for lens in lenses if lens.command}


async def test_incremental_edits_land_where_the_editor_made_them_past_form_feeds(
    client: LanguageClient, tmp_path
):
    """Lines end at \\n, \\r\\n and \\r only: a form feed (GNU sources separate pages with them) or
    U+2028 in a comment does not start a line, so an edit below one lands on its own line."""
    text = "// Page one.\f\n// See also\u2028the next page.\n" + TWO_KERNELS
    uri = uri_of(tmp_path, "pages.cu")
    open_document(client, uri, text)
    lines = text.split("\n")
    assert await rename_gather_rows(client, uri, text) == {
        "scale_add": next(i for i, t in enumerate(lines) if "void scale_add" in t),
        "gather": next(i for i, t in enumerate(lines) if "void gather_rows" in t),
    }


async def test_a_client_asking_for_utf8_first_gets_utf16_positions_that_hold(
    neovim: LanguageClient, tmp_path
):
    """Neovim lists UTF-8 first; the server's columns are UTF-16 units, so it says so, and an edit after a
    non-ASCII character lands where it was made."""
    result = neovim.initialized_with  # type: ignore[attr-defined]
    assert result.capabilities.position_encoding == types.PositionEncodingKind.Utf16
    text = TWO_KERNELS.replace("__global__ void gather_rows", "/* é😀 */ __global__ void gather_rows")
    uri = uri_of(tmp_path, "accents.cu")
    open_document(neovim, uri, text)
    assert set(await rename_gather_rows(neovim, uri, text)) == {"scale_add", "gather"}


async def test_hover_shows_what_is_known(client: LanguageClient, tmp_path):
    uri = uri_of(tmp_path, "hover.cu")
    open_document(client, uri, SCALE_ADD)
    line = next(i for i, t in enumerate(SCALE_ADD.split("\n")) if "scale_add(" in t)
    at = types.Position(line=line, character=SCALE_ADD.split("\n")[line].index("scale_add") + 3)
    params = types.HoverParams(text_document=types.TextDocumentIdentifier(uri=uri), position=at)
    hover = await client.text_document_hover_async(params)
    assert hover is not None and isinstance(hover.contents, types.MarkupContent)
    text = hover.contents.value
    assert "| `x` | input | float32 | n |" in text
    assert "| `out` | output | float32 | n |" in text
    assert "block (256) · grid (ceil_div(n, block.x))" in text
    assert "n = 16,777,216" in text
    assert "Verified timings appear after an optimization run (needs a GPU)" in text

    client.text_document_did_save(
        types.DidSaveTextDocumentParams(text_document=types.TextDocumentIdentifier(uri=uri))
    )

    async def compiled() -> bool:
        result = await client.text_document_hover_async(params)
        return result is not None and "registers" in result.contents.value  # type: ignore[union-attr]

    for _ in range(200):
        if await compiled():
            break
        await asyncio.sleep(0.05)
    else:
        pytest.fail("hover never showed compile resources")
    away = types.Position(line=0, character=1)  # the comment on line 0 is no kernel name
    assert (
        await client.text_document_hover_async(
            types.HoverParams(text_document=params.text_document, position=away)
        )
        is None
    )


async def test_add_benchmark_spec_writes_a_spec_that_parses(client: LanguageClient, tmp_path):
    uri = uri_of(tmp_path, "addspec.cu")
    open_document(client, uri, TWO_KERNELS)
    line = next(i for i, t in enumerate(TWO_KERNELS.split("\n")) if "scale_add(" in t)
    where = types.Range(
        start=types.Position(line=line, character=30), end=types.Position(line=line, character=30)
    )

    def ask(only: list[str] | None) -> types.CodeActionParams:
        return types.CodeActionParams(
            text_document=types.TextDocumentIdentifier(uri=uri),
            range=where,
            context=types.CodeActionContext(diagnostics=[], only=only),
        )

    # `context.only` is honoured: no rewrite exists yet, and "refactor" holds only "Optimize kernel".
    assert not await client.text_document_code_action_async(ask([types.CodeActionKind.RefactorRewrite]))
    refactors = await client.text_document_code_action_async(ask([types.CodeActionKind.Refactor]))
    assert [a.title for a in refactors or []] == ["Optimize kernel: scale_add"]
    actions = await client.text_document_code_action_async(ask([types.CodeActionKind.QuickFix]))
    assert actions and [a.title for a in actions] == ["Add benchmark spec for scale_add"]
    action = actions[0]
    assert isinstance(action, types.CodeAction) and action.kind == types.CodeActionKind.QuickFix
    assert action.edit is not None
    edited = apply_text_edits(TWO_KERNELS, edits_for(action.edit, uri))
    targets = load_targets(Path("addspec.cu"), edited)
    assert targets.spec_errors == ()
    scale_add = targets.find("scale_add")
    assert scale_add is not None and scale_add.spec is not None and not scale_add.spec.inferred

    # The edited text, sent back, gets no spec errors and the lens no longer offers to add the spec.
    replace_text(client, uri, edited, version=2)
    assert all(d.severity != types.DiagnosticSeverity.Error for d in await diagnostics_for(client, uri, 2))
    lenses = await client.text_document_code_lens_async(
        types.CodeLensParams(text_document=types.TextDocumentIdentifier(uri=uri))
    )
    assert [lens.command.title for lens in lenses if lens.command] == ["▶ Optimize", "▶ Optimize"]


async def test_a_spec_added_to_a_crlf_file_ends_its_lines_in_crlf(client: LanguageClient, tmp_path):
    text = TWO_KERNELS.replace("\n", "\r\n")
    uri = uri_of(tmp_path, "windows.cu")
    open_document(client, uri, text)
    line = next(i for i, t in enumerate(text.split("\n")) if "scale_add(" in t)
    at = types.Position(line=line, character=30)
    actions = await client.text_document_code_action_async(
        types.CodeActionParams(
            text_document=types.TextDocumentIdentifier(uri=uri),
            range=types.Range(start=at, end=at),
            context=types.CodeActionContext(diagnostics=[], only=[types.CodeActionKind.QuickFix]),
        )
    )
    assert actions and isinstance(actions[0], types.CodeAction) and actions[0].edit is not None
    edited = apply_text_edits(text, edits_for(actions[0].edit, uri))
    assert "/* cuda-agent" in edited and edited.count("\n") == edited.count("\r\n")


async def test_optimize_without_a_gpu_answers_every_request_and_a_save_says_so_once(
    client: LanguageClient, tmp_path
):
    uri = uri_of(tmp_path, "opt.cu")
    open_document(client, uri, SCALE_ADD)
    command = types.ExecuteCommandParams(command="cudaAgent.optimize", arguments=[uri, "scale_add"])
    first = await client.workspace_execute_command_async(command)
    second = await client.workspace_execute_command_async(command)
    assert first == second == {"started": False, "reason": "no GPU"}
    # Asked twice, answered twice where the user sees it (an Error: the type every client shows).
    await wait_until(lambda: len(client.messages) >= 2, what="two window/showMessage")
    for message in client.messages:
        assert message.type == types.MessageType.Error
        assert message.message.startswith("Optimizing needs an NVIDIA GPU")
        assert "cuda-agent serve --tcp" in message.message
    # A command for a kernel that is not there answers, says so, and does not crash anything.
    odd = types.ExecuteCommandParams(command="cudaAgent.optimize", arguments=[uri, "nope", 3])
    assert (await client.workspace_execute_command_async(odd))["started"] is False
    await wait_until(lambda: len(client.messages) >= 3, what="the answer about 'nope'")
    assert client.messages[2].message == "Not optimized: no kernel 'nope' in an open document"

    # Saving optimizes unasked (the kernel under the cursor): that only goes to the log now.
    line = next(i for i, t in enumerate(SCALE_ADD.split("\n")) if "scale_add(" in t)
    at = types.Position(line=line, character=SCALE_ADD.split("\n")[line].index("scale_add"))
    await client.text_document_hover_async(
        types.HoverParams(text_document=types.TextDocumentIdentifier(uri=uri), position=at)
    )
    client.text_document_did_save(
        types.DidSaveTextDocumentParams(text_document=types.TextDocumentIdentifier(uri=uri))
    )

    def logged() -> bool:
        return any("Optimizing needs an NVIDIA GPU" in m.message for m in client.log_messages)

    await wait_until(logged, 30.0, "the save's attempt in the log")
    assert len(client.messages) == 3


async def test_saves_without_a_gpu_say_so_once(client: LanguageClient, tmp_path):
    """Work nobody asked for (the save trigger) tells once, then only logs."""
    uri = uri_of(tmp_path, "saved.cu")
    open_document(client, uri, SCALE_ADD)
    line = next(i for i, t in enumerate(SCALE_ADD.split("\n")) if "scale_add(" in t)
    at = types.Position(line=line, character=SCALE_ADD.split("\n")[line].index("scale_add"))
    await client.text_document_hover_async(  # the cursor on the kernel: a save optimizes it
        types.HoverParams(text_document=types.TextDocumentIdentifier(uri=uri), position=at)
    )
    save = types.DidSaveTextDocumentParams(text_document=types.TextDocumentIdentifier(uri=uri))
    client.text_document_did_save(save)
    await wait_until(lambda: client.messages, 30.0, "the first save's notice")
    client.text_document_did_save(save)

    def logged() -> bool:
        return any("Optimizing needs an NVIDIA GPU" in m.message for m in client.log_messages)

    await wait_until(logged, 30.0, "the second save's attempt in the log")
    assert [m.type for m in client.messages] == [types.MessageType.Warning]
    assert client.messages[0].message.startswith("Optimizing needs an NVIDIA GPU")


BAD_INPUTS = {
    "python.cu": "def main():\n    print('not CUDA at all')\n",
    "junk.cu": "".join(chr(c) for c in range(0, 0x250)) + "\ufffd\U0001f600" * 50,
    "half.cu": "template <typename T> __global__ void half(const T* x, T* y, int n) {\n  int i = blockIdx.",
    "badspec.cu": "/* cuda-agent\n[sizes\nn = = 3\n*/\n" + SCALE_ADD,
    "nameless.cu": "__global__ void (float* x) { x[0] = 1; }\n__global__ void\n",
    "huge.cu": SCALE_ADD.replace("scale_add", "k{}") * 1
    + "".join(SCALE_ADD.replace("scale_add", f"k{i}") for i in range(400)),
}


@pytest.mark.parametrize("name", sorted(BAD_INPUTS))
async def test_bad_input_never_crashes_the_server(client: LanguageClient, tmp_path, name):
    uri = uri_of(tmp_path, name)
    open_document(client, uri, BAD_INPUTS[name])
    await diagnostics_for(client, uri, 1)
    lenses = await client.text_document_code_lens_async(
        types.CodeLensParams(text_document=types.TextDocumentIdentifier(uri=uri))
    )
    assert lenses is not None
    for line in (0, 1, 3):
        await client.text_document_hover_async(
            types.HoverParams(
                text_document=types.TextDocumentIdentifier(uri=uri),
                position=types.Position(line=line, character=5),
            )
        )
    client.text_document_did_save(
        types.DidSaveTextDocumentParams(text_document=types.TextDocumentIdentifier(uri=uri))
    )
    # Still answering after all that:
    assert (
        await client.text_document_code_lens_async(
            types.CodeLensParams(text_document=types.TextDocumentIdentifier(uri=uri))
        )
        is not None
    )


# Line ends of every kind, and characters that are not line ends to LSP but are to str.splitlines.
_TOKENS = [*"{}()<>[];*/\"'#_ \n\tabcxyz019+=é😀", "\r\n", "\r", "\f", "\u2028", "__global__ ",
           "/* cuda-agent\n", "*/", "<<<", ">>>"]  # fmt: skip
_EDIT_TEXT = st.lists(st.sampled_from(_TOKENS), max_size=6).map("".join)


@settings(max_examples=25, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(
    edits=st.lists(st.tuples(st.floats(0, 1), st.floats(0, 1), _EDIT_TEXT), min_size=1, max_size=8),
    data=st.data(),
)
async def test_random_edits_never_crash_and_code_lens_always_answers(
    client: LanguageClient, tmp_path, edits, data
):
    uri = uri_of(tmp_path, f"fuzz{abs(hash(repr(edits)))}.cu")
    text = TWO_KERNELS
    open_document(client, uri, text)
    for version, (start_at, length, insert) in enumerate(edits, start=2):
        start = int(start_at * len(text))
        end = min(len(text), start + int(length * 40))
        # An editor cannot place a change between the \r and the \n of a line end.
        start, end = (
            i - 1 if 0 < i < len(text) and text[i - 1 : i + 1] == "\r\n" else i for i in (start, end)
        )
        text = change_text(client, uri, text, start, end, insert, version)
        if data.draw(st.booleans()):
            lenses = await client.text_document_code_lens_async(
                types.CodeLensParams(text_document=types.TextDocumentIdentifier(uri=uri))
            )
            assert lenses is not None
    lenses = await client.text_document_code_lens_async(
        types.CodeLensParams(text_document=types.TextDocumentIdentifier(uri=uri))
    )
    assert lenses is not None
    # The server holds the editor's text: the same kernels, on the same lines.
    kernels = {(t.kernel.name, t.kernel.span.start_line) for t in load_targets(Path("f.cu"), text).targets}
    shown = {(lens.command.arguments[1], lens.range.start.line) for lens in lenses if lens.command}
    assert shown == {(name, line) for name, line in kernels if name}
    await diagnostics_for(client, uri, len(edits) + 1)
    client.text_document_did_close(
        types.DidCloseTextDocumentParams(text_document=types.TextDocumentIdentifier(uri=uri))
    )
