"""The server's analysis after an edit, reparsed incrementally from the previous tree, is exactly the
analysis of a fresh parse: kernels, spans, specs and spec errors, whatever the edit."""

from __future__ import annotations

from pathlib import Path

from cuda_agent.server.documents import analyse
from hypothesis import given, settings
from hypothesis import strategies as st

ROOT = Path(__file__).resolve().parents[1]
TEXT = (ROOT / "examples" / "elementwise.cu").read_text() + (
    ROOT / "bench" / "kernels" / "softmax_rows.cu"
).read_text()
PATH = Path("edited.cu")
SNIPPETS = ["", "x", "\n", "}", "{", "/*", "*/", "__global__ void k(float* y) { y[0] = 1; }\n", "é",
            "[launch]\n", "block = [64]", "int n", ";", "// c\n"]  # fmt: skip


@settings(max_examples=60, deadline=None)
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
        fresh, _ = analyse(PATH, text, version)
        assert analysis.targets == fresh.targets
        assert analysis.lines == fresh.lines


def test_an_edit_on_a_kernels_first_line_moves_its_columns() -> None:
    _, parsed = analyse(PATH, TEXT, 1)
    edited = TEXT.replace("__global__ void saxpy", "static __global__ void saxpy", 1)
    analysis, _ = analyse(PATH, edited, 2, parsed)
    assert analysis.targets == analyse(PATH, edited, 2)[0].targets
    saxpy = analysis.target_named("saxpy")
    assert saxpy is not None and saxpy.kernel.name_span.start_column == len("static __global__ void ")
