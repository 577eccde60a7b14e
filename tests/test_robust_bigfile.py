"""A 60,000-line file (over 3,000 kernels) costs its size, not its size times its kernels: in the real server
its first diagnostics come within seconds, an edit deep inside is answered at the positions it moved, and
an edit inside one kernel changes that kernel's results only, the others' kept as they were. Time bounds
here are loose (a noisy 2-core CI machine); the figures to meet are bench/server_bench.py's."""

from __future__ import annotations

import re
import statistics
import time
from collections.abc import AsyncIterator
from pathlib import Path

import pytest
import pytest_lsp
from cuda_agent.server import diagnostics, hover, lenses
from cuda_agent.server.documents import Document, analyse
from lsprotocol import types
from pytest_lsp import ClientServerConfig, LanguageClient, client_capabilities

from bench.parse_bench import generate_source
from tests.server_support import (
    SERVE,
    SERVER_ENV,
    change_text,
    diagnostics_for,
    make_recording_client,
    open_document,
    position_of,
)
from tests.test_incremental_analysis import fresh
from tests.test_incremental_server import answers

LINES = 60_000
# Within seconds on a quiet 2-core machine (the bench's target is 5 s); a minute before the fixes.
FIRST_DIAGNOSTICS_S = 45.0
EDIT_ANSWER_S = 5.0  # the bench asks ≤ 10 ms on 5,000 lines; here only that nothing reads the file anew

# A spec whose grid has an error: its diagnostic sits on a line of the comment, which an edit above moves.
SPECCED = """/* cuda-agent
[sizes]
n = 1024
[args]
x = { role = "input", dtype = "float32", shape = ["n"] }
y = { role = "output", dtype = "float32", shape = ["n"] }
n = { role = "scalar", dtype = "int32", value = "n" }
[launch]
block = [128]
grid = ["ceil_div(n, blocks.x)"]
*/
__global__ void specced(const float* x, float* y, int n) {
    int i = blockIdx.x * blockDim.x + threadIdx.x;
    if (i < n) y[i] = x[i];
}
"""
PROBES = ("probe_top", "probe_middle", "probe_end")


def probe(name: str) -> str:
    """A kernel no spec can be inferred for (it has no size): a diagnostic on its name says so."""
    return f"__global__ void {name}(float* y) {{ y[threadIdx.x] = 1.0f; }}\n"


def big_source(lines: int = LINES) -> str:
    modules = generate_source(lines)
    middle = modules.index("// ----", len(modules) // 2)  # between two comment lines of a module's header
    return (
        probe("probe_top") + modules[:middle] + probe("probe_middle") + SPECCED + modules[middle:]
        + probe("probe_end")
    )  # fmt: skip


def name_position(text: str, name: str) -> types.Position:
    return position_of(text, text.index(f"void {name}(") + len("void "))


def probe_lines(diagnostics: list[types.Diagnostic]) -> dict[str, int]:
    """The line of each probe's "no spec" diagnostic."""
    return {
        d.message.split(":")[0]: d.range.start.line
        for d in diagnostics
        if d.code == "no-spec" and d.message.startswith("probe_")
    }


def described(diagnostics: list[types.Diagnostic]) -> list[tuple[object, ...]]:
    return sorted((d.range.start.line, d.range.start.character, d.range.end.character, d.code, d.message)
                  for d in diagnostics)  # fmt: skip


@pytest.fixture(scope="module")
def source() -> str:
    return big_source()


@pytest_lsp.fixture(
    config=ClientServerConfig(
        server_command=SERVE, server_env=SERVER_ENV, client_factory=make_recording_client
    )
)
async def client(lsp_client: LanguageClient) -> AsyncIterator[None]:
    await lsp_client.initialize_session(
        types.InitializeParams(capabilities=client_capabilities("visual-studio-code"))
    )
    yield
    await lsp_client.shutdown_session()


async def _opened(client: LanguageClient, tmp_path: Path, text: str) -> tuple[str, list[types.Diagnostic]]:
    path = tmp_path / "big.cu"
    path.write_text(text)
    uri = path.as_uri()
    start = time.monotonic()
    open_document(client, uri, text)
    found = await diagnostics_for(client, uri, 1, timeout_s=FIRST_DIAGNOSTICS_S * 2)
    seconds = time.monotonic() - start
    assert seconds < FIRST_DIAGNOSTICS_S, f"first diagnostics after {seconds:.1f} s"
    return uri, found


async def _hover(client: LanguageClient, uri: str, at: types.Position) -> str | None:
    found = await client.text_document_hover_async(
        types.HoverParams(text_document=types.TextDocumentIdentifier(uri=uri), position=at)
    )
    return None if found is None else str(found.contents)


async def _lenses(client: LanguageClient, uri: str) -> list[tuple[int, str]]:
    found = await client.text_document_code_lens_async(
        types.CodeLensParams(text_document=types.TextDocumentIdentifier(uri=uri))
    )
    return [(lens.range.start.line, lens.command.title if lens.command else "") for lens in found or []]


async def test_a_60000_line_file_gets_diagnostics_for_its_kernels_within_seconds(
    client: LanguageClient, tmp_path: Path, source: str
) -> None:
    assert source.count("\n") >= LINES and source.count("__global__") > 3000
    uri, found = await _opened(client, tmp_path, source)
    assert probe_lines(found) == {name: name_position(source, name).line for name in PROBES}
    errors = [d for d in found if d.code == "spec-error"]
    grid_line = position_of(source, source.index("ceil_div(n, blocks.x)")).line
    assert [d.range.start.line for d in errors] == [grid_line]
    # Every kernel has its lenses, each at its kernel's line.
    lenses = await _lenses(client, uri)
    assert {line for line, _ in lenses} >= {name_position(source, name).line for name in (*PROBES, "specced")}
    assert len({line for line, _ in lenses}) == source.count("__global__")


async def test_an_edit_deep_in_the_file_moves_what_is_below_it(
    client: LanguageClient, tmp_path: Path, source: str
) -> None:
    uri, before = await _opened(client, tmp_path, source)
    at = source.index(probe("probe_middle"))
    start = time.monotonic()
    text = change_text(client, uri, source, at, at, "// two lines\n// above the middle\n", version=2)
    # The hover answers from the new text's kernel map: the kernel below the edit, two lines down.
    assert "probe_end" in (await _hover(client, uri, name_position(text, "probe_end")) or "")
    assert time.monotonic() - start < EDIT_ANSWER_S
    assert "probe_end" not in (await _hover(client, uri, name_position(source, "probe_end")) or "")
    assert "probe_top" in (await _hover(client, uri, name_position(text, "probe_top")) or "")

    after = await diagnostics_for(client, uri, 2, timeout_s=60)
    lines = probe_lines(after)
    assert lines == {name: name_position(text, name).line for name in PROBES}
    assert lines["probe_top"] == probe_lines(before)["probe_top"]
    assert lines["probe_end"] == probe_lines(before)["probe_end"] + 2
    # Every diagnostic below the edit two lines down, the others where they were, none lost or added; and
    # the lines their messages cite (1-based: "line 30156: cols is a parameter of ...") moved with them.
    cut = name_position(source, "probe_middle").line

    def moved(message: str) -> str:
        return re.sub(r"line (\d+)", lambda m: f"line {int(m[1]) + 2 * (int(m[1]) > cut)}", message)

    expected = sorted(
        (d.range.start.line + 2 * (d.range.start.line >= cut), moved(d.message)) for d in before
    )
    assert sum(line > cut for line, _ in expected) > 100
    assert sorted((d.range.start.line, d.message) for d in after) == expected


async def test_an_edit_inside_one_kernel_changes_only_that_kernels_results(
    client: LanguageClient, tmp_path: Path, source: str
) -> None:
    uri, before = await _opened(client, tmp_path, source)
    lenses_before = await _lenses(client, uri)
    at = source.index(probe("probe_middle"))
    # On its own line still: an element-wise kernel now, whose spec is inferred.
    sized = (
        "__global__ void probe_middle(float* y, int n) "
        "{ int i = blockIdx.x * blockDim.x + threadIdx.x; if (i < n) y[i] = 1.0f; }\n"
    )
    text = change_text(client, uri, source, at, at + len(probe("probe_middle")), sized, version=2)
    after = await diagnostics_for(client, uri, 2, timeout_s=60)
    middle_line = name_position(text, "probe_middle").line
    gone = [d for d in before if d.range.start.line == middle_line]
    assert [d.code for d in gone] == ["no-spec"]
    assert described(after) == described([d for d in before if d not in gone])
    lenses_after = await _lenses(client, uri)
    assert [lens for lens in lenses_after if lens[0] != middle_line] == [
        lens for lens in lenses_before if lens[0] != middle_line
    ]
    assert "spec inferred · Add spec" in [title for line, title in lenses_after if line == middle_line]
    assert "spec inferred" in (await _hover(client, uri, name_position(text, "probe_middle")) or "")


def test_an_edit_reads_again_only_the_kernels_it_touched(tmp_path: Path) -> None:
    """In-process, on a smaller file: the analysis after an edit is the fresh one; after an edit inside a
    kernel every other kernel keeps the spec inferred before (the same object: not inferred again), and
    after an edit in host code only the kernels it launches can change."""
    text = big_source(20_000)
    path = tmp_path / "big.cu"
    path.write_text(text)
    analysis, parsed = analyse(path, text, 1)
    before = {t.kernel.name: t.spec for t in analysis.targets.targets}

    text = text.replace("y[i] = scale_40(a * x[i] + b * y[i], 1.0f);", "y[i] = scale_40(a * x[i], 1.0f);")
    analysis, parsed = analyse(path, text, 2, parsed)
    again = {t.kernel.name for t in analysis.targets.targets if t.spec is not before[t.kernel.name]}
    assert again == {"axpby_40"}
    assert analysis.lines == tuple(text.split("\n"))
    assert analysis.targets == fresh(text, 2, path).targets

    before = {t.kernel.name: t.spec for t in analysis.targets.targets}
    # The launch that main() reaches (through launch_module_0): its block is axpby_0's spec's.
    launch = "axpby_0<<<(rows * cols + 255) / 256, 256, 0, s>>>"
    assert text.count(launch) == 1
    text = text.replace(launch, "axpby_0<<<(rows * cols + 127) / 128, 128, 0, s>>>")
    analysis, parsed = analyse(path, text, 3, parsed)
    changed = {t.kernel.name for t in analysis.targets.targets if t.spec != before[t.kernel.name]}
    assert changed == {"axpby_0"}
    axpby = analysis.target_named("axpby_0")
    assert axpby is not None and axpby.spec is not None and axpby.spec.launch.block == (128,)
    assert analysis.targets == fresh(text, 3, path).targets


# The bench's targets (bench/server_bench.py) for an edit's kernel map and for the lenses after it; here
# the server's own side of them, in-process (the round trip adds the transport).
EDIT_MS, LENS_MS = 10.0, 20.0


def test_typing_in_a_60000_line_file_costs_what_it_changed(tmp_path: Path, source: str) -> None:
    """Keystrokes in a comment near the top of the 60,000-line file, each followed by what the editor asks
    (a hover on the last kernel, the code lenses, the diagnostics): the tree is not parsed again and no
    kernel is made anew, so each costs well within the bench's targets (a keystroke took 120 ms before).
    Then an edit in code, a line typed above the middle and more typing: every answer is a fresh
    analysis's."""
    path = tmp_path / "big.cu"
    path.write_text(source)
    document = Document(path.as_uri(), path, 1, source)
    document.analysis, parsed = analyse(path, source, 1)
    lenses.code_lenses(document.analysis, document)
    diagnostics.document_diagnostics(document, document.analysis)
    text, at = source, source.index("Module 1:")
    end = name_position(source, "probe_end")  # on a line below: typing does not move it
    edit_ms, lens_ms, diagnostics_ms = [], [], []
    for version in range(2, 22):
        text = text[:at] + "x" + text[at:]
        start = time.perf_counter()
        analysis, parsed = analyse(path, text, version, parsed)
        assert parsed is not None and parsed.comment is not None  # not parsed again
        shown = hover.hover(analysis, end, {}, False)
        edit_ms.append((time.perf_counter() - start) * 1000)
        assert shown is not None and "probe_end" in str(shown.contents)
        document.version, document.text, document.analysis = version, text, analysis
        start = time.perf_counter()
        lenses.code_lenses(analysis, document)
        lens_ms.append((time.perf_counter() - start) * 1000)
        start = time.perf_counter()
        diagnostics.document_diagnostics(document, analysis)
        diagnostics_ms.append((time.perf_counter() - start) * 1000)
    assert statistics.median(edit_ms) < EDIT_MS, edit_ms
    assert statistics.median(lens_ms) < LENS_MS, lens_ms
    assert statistics.median(diagnostics_ms) < LENS_MS, diagnostics_ms

    middle = text.index(probe("probe_middle"))
    body = text.index("acc += static_cast<float>", middle)
    for version, (where, typed) in enumerate([(body, " "), (middle, "// a line\n"), (at, "y")], 22):
        text = text[:where] + typed + text[where:]
        analysis, parsed = analyse(path, text, version, parsed)
        document.version, document.text, document.analysis = version, text, analysis
    assert answers(analysis, document) == answers(
        fresh(text, 24, path), Document(document.uri, path, 24, text)
    )
