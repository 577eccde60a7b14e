"""The server's analysis after an edit, reparsed incrementally from the previous tree, is exactly the
analysis of a fresh parse: kernels, spans, specs and spec errors, whatever the edit."""

from __future__ import annotations

from pathlib import Path

import pytest
from cuda_agent.agent import kernels, parsing, targets
from cuda_agent.agent.spec import parse
from cuda_agent.server.documents import Analysis, analyse
from hypothesis import example, given, settings
from hypothesis import strategies as st

ROOT = Path(__file__).resolve().parents[1]
TEXT = (ROOT / "examples" / "elementwise.cu").read_text() + (
    ROOT / "bench" / "kernels" / "softmax_rows.cu"
).read_text()
PATH = Path("edited.cu")
SNIPPETS = ["", "x", "\n", "}", "{", "/*", "*/", "__global__ void k(float* y) { y[0] = 1; }\n", "é",
            "[launch]\n", "block = [64]", "int n", ";", "// c\n", "namespace ops {\n", 'extern "C" {\n',
            "template <typename T>\n", "  "]  # fmt: skip


def fresh(text: str, version: int, path: Path = PATH) -> Analysis:
    """A parse from nothing, with the caches of earlier analyses (kernels, inferred specs) emptied: the
    reference the incremental, cached path must equal."""
    kernels._KNOWN.clear()
    targets._INFERRED.clear()
    targets._FROM_SIGNATURE.clear()
    targets._HOST_FACTS.clear()
    targets._POINTS.clear()
    targets._PARTIAL_POINTS.clear()
    parse._PARSED.clear()
    parsing._RECENT.clear()
    return analyse(path, text, version)[0]


def spec_positions(analysis: Analysis) -> list[tuple[object, ...]]:
    """Where each written spec and its values are: not part of a spec's equality, but what the editor
    shows errors on and what a rewrite edits."""
    return [
        (t.kernel.name, t.spec.span, t.spec.block_span, sorted(t.spec.value_spans.items()))
        for t in analysis.targets.targets
        if t.spec is not None and not t.spec.inferred
    ]


@settings(max_examples=150, deadline=None)
@given(
    edits=st.lists(
        st.tuples(st.integers(0, len(TEXT)), st.integers(0, 40), st.sampled_from(SNIPPETS)),
        min_size=1,
        max_size=4,
    )
)
def test_incremental_reparse_gives_the_fresh_analysis(edits: list[tuple[int, int, str]]) -> None:
    text = TEXT
    analysis, parsed = analyse(PATH, text, 1)
    for version, (start, length, inserted) in enumerate(edits, 2):
        start = min(start, len(text))
        text = text[:start] + inserted + text[start + length :]
        analysis, parsed = analyse(PATH, text, version, parsed)
        reference = fresh(text, version)
        assert analysis.targets == reference.targets  # spec errors included, with their lines
        assert spec_positions(analysis) == spec_positions(reference)
        assert analysis.lines == reference.lines


# A program: kernels launched from host code whose values the inferred specs read (launchers called from
# main, #defines, dim3), and edits that touch it where typing goes: a launcher, main, a #define, a comment.
PROGRAM = (ROOT / "tests" / "programs" / "rmsnorm_rows.cu").read_text() + (
    ROOT / "tests" / "programs" / "saxpy_stream.cu"
).read_text().replace("int main(", "int main_saxpy(")
HOST_SNIPPETS = ["", "x", "\n", "}", "2", "0", "(", "int n = 5;\n", "#define N 3\n", "dim3 b(64);",
                 "<<<", "// c\n", "/*", "*/", "launch_rmsnorm(", " * 2", "const int rows = 7;\n", '"', "'",
                 "<", "*", "/"]  # fmt: skip


@settings(max_examples=150, deadline=None)
@given(
    edits=st.lists(
        st.tuples(st.integers(0, len(PROGRAM)), st.integers(0, 30), st.sampled_from(HOST_SNIPPETS)),
        min_size=1,
        max_size=4,
    )
)
# A body cut short (the kernel then spans its launcher), then an argument of the launch removed: the
# host code's digest once left out the broken kernel's bytes, the launch among them, and kept stale facts.
@example(edits=[(0, 13, ""), (3020, 24, ""), (3291, 4, "")])
def test_specs_inferred_from_the_host_code_follow_every_edit(edits: list[tuple[int, int, str]]) -> None:
    """What the host code says is kept between edits that cannot change it; kept or not, the specs are the
    fresh analysis's."""
    text = PROGRAM
    analysis, parsed = analyse(PATH, text, 1)
    assert any("launch in" in t.note for t in analysis.targets.targets)  # the program is followed
    for version, (start, length, inserted) in enumerate(edits, 2):
        start = min(start, len(text))
        text = text[:start] + inserted + text[start + length :]
        analysis, parsed = analyse(PATH, text, version, parsed)
        reference = fresh(text, version)
        assert analysis.targets == reference.targets
        assert [t.note for t in analysis.targets.targets] == [t.note for t in reference.targets.targets]


def test_an_edit_on_a_kernels_first_line_moves_its_columns() -> None:
    _, parsed = analyse(PATH, TEXT, 1)
    edited = TEXT.replace("__global__ void saxpy", "static __global__ void saxpy", 1)
    analysis, _ = analyse(PATH, edited, 2, parsed)
    assert analysis.targets == fresh(edited, 2).targets
    saxpy = analysis.target_named("saxpy")
    assert saxpy is not None and saxpy.kernel.name_span.start_column == len("static __global__ void ")


@pytest.mark.parametrize(("opening", "check"), [
    ('extern "C" {\n', lambda k: k.extern_c),
    ("namespace ops {\n", lambda k: k.qualified_name == "ops::saxpy"),
])  # fmt: skip
def test_a_kernel_wrapped_by_an_edit_is_read_in_its_new_context(opening: str, check: object) -> None:
    _, parsed = analyse(PATH, TEXT, 1)
    start = TEXT.index("__global__ void saxpy")
    end = TEXT.index("}\n", start) + 2
    wrapped = TEXT[:start] + opening + TEXT[start:end] + "}\n" + TEXT[end:]
    analysis, _ = analyse(PATH, wrapped, 2, parsed)
    saxpy = analysis.target_named("saxpy")
    assert saxpy is not None and check(saxpy.kernel)  # type: ignore[operator]
    assert analysis.targets == fresh(wrapped, 2).targets
