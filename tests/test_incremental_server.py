"""After any run of edits, what the server answers from its incremental analysis (kernels kept in runs and
moved lazily, targets kept where the edit left them, edits inside a comment not parsed at all) is what it
answers from a fresh analysis of the same text: hovers, code lenses, diagnostics and code actions, at the
same lines and for the same kernels."""

from __future__ import annotations

from pathlib import Path
from unittest import mock

from cuda_agent.agent import parsing, targets
from cuda_agent.agent.parsing import parse_cuda
from cuda_agent.agent.targets import TargetList
from cuda_agent.server import diagnostics, hover, lenses
from cuda_agent.server.actions import code_actions
from cuda_agent.server.capabilities import ClientSupport
from cuda_agent.server.documents import Analysis, Document, Parsed, analyse
from cuda_agent.server.positions import byte_position
from cuda_agent.server.replies import encode
from hypothesis import example, given, settings
from hypothesis import strategies as st
from lsprotocol import types
from tree_sitter import Tree

from bench.parse_bench import generate_source
from tests.test_incremental_analysis import fresh, spec_positions

ROOT = Path(__file__).resolve().parents[1]
HEADER = "// A file header, where typing goes:\n/* a block comment */\n\n"
# A spec whose grid has an error: a diagnostic on a line of the comment.
BROKEN_SPEC = """/* cuda-agent
[sizes]
n = 1024
[launch]
block = [128]
grid = ["ceil_div(n, blocks.x)"]
*/
__global__ void specced(const float* x, float* y, int n) { if (threadIdx.x < n) y[0] = x[0]; }
"""
TEXT = (
    HEADER
    + (ROOT / "examples" / "elementwise.cu").read_text()
    + "// between files\n"
    + generate_source(400)
    + BROKEN_SPEC
    + (ROOT / "tests" / "programs" / "rmsnorm_rows.cu").read_text()
)
PATH = Path("edited.cu")
SUPPORT = ClientSupport(
    apply_edit=True, configuration=True, work_done_progress=True, lens_refresh=True, document_changes=True,
    code_action_literals=True, code_action_resolve_edit=True, code_action_preferred=True,
    code_action_disabled=True, hover_markdown=True,
)  # fmt: skip

# Where edits go, found again in each text: the k-th occurrence of an anchor, a few bytes either side.
ANCHORS = ["//", "/*", "*/", "__global__", "\n", "{", "}", "cuda-agent", "launch_module", "<<<", "void", "(",
           "file header", "block comment", "between files", "threadIdx", "acc", "Module"]  # fmt: skip
SNIPPETS = ["", "x", "/", " ", "\n", "é", "😀", "*", "*/", "/*", "//", "}", "{", "\\", '"', "cuda-agent",
            "__global__ void k(float* y) { y[0] = 1; }\n", "// c\n", "int n = 3;\n", "block = [64]", "<<<",
            ";", "\r\n"]  # fmt: skip
EDITS = st.lists(
    st.tuples(
        st.sampled_from(ANCHORS),
        st.integers(0, 200),
        st.integers(-3, 4),
        st.integers(0, 6),
        st.sampled_from(SNIPPETS),
    ),
    min_size=1,
    max_size=8,
)

# Typing in comments between declarations (the file's header, a module's banner), which is not parsed.
COMMENT_EDITS = st.lists(
    st.tuples(
        st.sampled_from(
            ["file header", "block comment", "between files", "Module", "No spec", "Element-wise"]
        ),
        st.integers(0, 200),
        st.integers(-12, 12),
        st.integers(0, 3),
        st.sampled_from(["x", "é", "/", " ", "", "*", "😀", "\\", "\n", "*/", "cuda-agent", "__global__"]),
    ),
    min_size=1,
    max_size=12,
)

# Lines typed and removed (Enter, Backspace at a line's start) anywhere: the lines that inferred specs
# cite ("called from main() at line 488") move, without the kernels being inferred again.
LINE_EDITS = st.lists(
    st.tuples(
        st.sampled_from(["\n", "__global__", "launch_module", "int main", "<<<", "#define", "//"]),
        st.integers(0, 200),
        st.integers(-2, 2),
        st.integers(0, 2),
        st.sampled_from(["\n", "\n\n", "", "x"]),
    ),
    min_size=1,
    max_size=10,
)


def edited(text: str, anchor: str, occurrence: int, shift: int, length: int, inserted: str) -> str:
    places = [i for i in range(len(text)) if text.startswith(anchor, i)] or [0]
    at = max(0, min(len(text), places[occurrence % len(places)] + shift))
    return text[:at] + inserted + text[at + length :]


def answers(analysis: Analysis, document: Document) -> dict[str, object]:
    """Everything the editor is told about the text: the hover and the code actions on each kernel's name,
    the code lenses and the diagnostics, as the JSON the client receives."""
    found: dict[str, object] = {
        "lenses": lenses.code_lenses(analysis, document).json,
        "diagnostics": diagnostics.document_diagnostics(document, analysis).json,
    }
    for target in analysis.targets.targets:
        span = target.kernel.name_span
        at = byte_position(analysis.lines, span.start_line, span.start_column)
        shown = hover.hover(analysis, at, {}, False)
        params = types.CodeActionParams(
            types.TextDocumentIdentifier(document.uri), types.Range(at, at), types.CodeActionContext([])
        )
        found[f"{target.kernel.name}@{at.line}:{at.character}"] = (
            encode(shown),
            encode(code_actions(analysis, document, params, SUPPORT)),
        )
    return found


def shape(tree: Tree) -> list[tuple[str, int, int]]:
    """Every node of the tree, with its bytes."""
    found, cursor, descending = [], tree.walk(), True
    while True:
        if descending:
            node = cursor.node
            assert node is not None
            found.append((node.type, node.start_byte, node.end_byte))
        if descending and cursor.goto_first_child():
            continue
        if cursor.goto_next_sibling():
            descending = True
            continue
        if not cursor.goto_parent():
            return found
        descending = False


def same_tree(parsed: Parsed) -> bool:
    """Whether the tree the edit left is the one a fresh parse gives: tree-sitter's recovery from syntax
    errors may differ between an incremental parse and a fresh one (not ours to test). A tree left unparsed
    (an edit inside a comment) must be the one its parse gives, and that must be the fresh one."""
    tree = parsed.tree
    if parsed.comment is not None:
        tree = parse_cuda(parsed.data, tree.copy())
        assert shape(tree) == shape(parsing._parser().parse(parsed.data)), "a comment edit changed the tree"
    return shape(tree) == shape(parsing._parser().parse(parsed.data))


def check_edits(text: str, edits: list[tuple[str, int, int, int, str]], path: Path = PATH) -> None:
    document = Document("file:///edited.cu", path, 1, text)
    document.analysis, parsed = analyse(path, text, 1)
    answers(document.analysis, document)  # what the editor asked before: kept lenses and diagnostics
    for version, edit in enumerate(edits, 2):
        text = edited(text, *edit)
        document.version, document.text = version, text
        analysis, next_parsed = analyse(path, text, version, parsed)
        assert next_parsed is not None
        parsed = next_parsed
        document.analysis = analysis
        if not same_tree(parsed):  # then start again from this text, as a server opening it
            document.analysis, parsed = analyse(path, text, version)
            continue
        reference = fresh(text, version, path)
        assert analysis.targets == reference.targets  # kernels, spans, specs and spec errors, with lines
        assert [t.note for t in analysis.targets.targets] == [t.note for t in reference.targets.targets]
        assert spec_positions(analysis) == spec_positions(reference)
        assert analysis.lines == reference.lines
        assert answers(analysis, document) == answers(reference, Document(document.uri, path, version, text))


@settings(max_examples=40, deadline=None)
@given(edits=EDITS)
def test_the_server_answers_after_edits_as_after_a_fresh_analysis(
    edits: list[tuple[str, int, int, int, str]],
):
    check_edits(TEXT, edits)


@settings(max_examples=30, deadline=None)
@given(edits=COMMENT_EDITS)
def test_typing_in_comments_answers_as_a_fresh_analysis(edits: list[tuple[str, int, int, int, str]]):
    check_edits(TEXT, edits)


@settings(max_examples=30, deadline=None)
@given(edits=LINE_EDITS)
# Found by CI: lines typed above a launch that a kernel's no-spec note cites ("line 211: cols is a parameter
# of launch_module_2()"), the kernel itself untouched: its diagnostic must cite the launch's line now.
@example(
    edits=[
        ("\n", 0, 0, 0, "x"),
        ("int main", 0, 0, 0, "\n"),
        ("\n", 200, 2, 0, "\n"),
        ("\n", 200, 2, 0, "\n"),
    ]
)
def test_lines_typed_and_removed_answer_as_a_fresh_analysis(edits: list[tuple[str, int, int, int, str]]):
    check_edits(TEXT, edits)


@settings(max_examples=20, deadline=None)
@given(edits=st.one_of(EDITS, LINE_EDITS))
def test_targets_made_into_one_block_after_many_runs_stay_the_same(
    edits: list[tuple[str, int, int, int, str]],
):
    with mock.patch.object(targets, "MAX_RUNS", 2), mock.patch.object(targets, "MAX_MOVES", 1):
        check_edits(TEXT, edits)


def test_typing_in_a_comment_is_not_parsed_and_keeps_every_target(tmp_path: Path) -> None:
    """Characters typed in the file's header comment, one by one: the tree is not parsed again, no kernel is
    read or inferred anew (the targets are those found before, moved), and the answers are the fresh ones."""
    path = tmp_path / "big.cu"
    text = TEXT
    analysis, parsed = analyse(path, text, 1)
    assert parsed is not None
    before = {t.kernel.name: t.spec for t in analysis.targets.targets}
    for version in range(2, 12):
        text = text[:3] + "é/x"[version % 3] + text[3:]  # inside "// A file header"
        analysis, parsed = analyse(path, text, version, parsed)
        assert parsed is not None and parsed.comment is not None  # not parsed
        assert isinstance(analysis.targets.targets, TargetList)
        assert {t.kernel.name: t.spec for t in analysis.targets.targets} == before
        inferred = [t for t in analysis.targets.targets if t.spec is not None and t.spec.inferred]
        assert inferred and all(t.spec is before[t.kernel.name] for t in inferred)  # not inferred again
    assert analysis.targets == fresh(text, 12, path).targets
    # Then a real edit, which parses (the tree had the comment edits applied, not parsed).
    text = text.replace("y[i] = scale_3(a * x[i]", "y[i] = scale_3(2 * x[i]")
    analysis, parsed = analyse(path, text, 13, parsed)
    assert isinstance(parsed, Parsed) and parsed.comment is None
    assert analysis.targets == fresh(text, 13, path).targets


def test_an_edit_that_ends_a_comment_or_types_a_kernel_in_it_is_parsed() -> None:
    _, parsed = analyse(PATH, TEXT, 1)
    for version, change in enumerate(["\n", "*/", "\\", "x\r"], 2):
        text = TEXT[:3] + change + TEXT[3:] if change != "*/" else TEXT.replace("a block", "a */ block", 1)
        analysis, found = analyse(PATH, text, version, parsed)
        assert found is not None and found.comment is None
        assert analysis.targets == fresh(text, version).targets
