"""A parse that reuses a recent parse of a similar text (a candidate is the file with one kernel
rewritten) gives exactly the tree a fresh parse gives, whatever the edit, broken code included."""

from __future__ import annotations

from pathlib import Path

from cuda_agent.agent import parsing
from cuda_agent.agent.parsing import parse_cuda
from hypothesis import given, settings
from hypothesis import strategies as st
from tree_sitter import Parser, Tree

ROOT = Path(__file__).resolve().parents[1]
# Big enough that parse_cuda looks for a recent parse to reuse.
TEXT = "\n".join(path.read_text() for path in sorted((ROOT / "bench" / "kernels").glob("*.cu")))
SNIPPETS = ["", "x", "\n", "}", "{", "/*", "*/", '"', "#if 0\n", "#endif\n", "é", ";", "<<<", ">>>",
            "__global__ void k(float* y) { y[0] = 1; }\n", "template <typename T>\n", "namespace ops {\n",
            'extern "C" {\n', "  "]  # fmt: skip


def fresh(text: str) -> Tree:
    return Parser(parsing.cuda_language()).parse(text.encode())


def test_the_text_is_big_enough_to_reuse_parses() -> None:
    assert len(TEXT.encode()) >= parsing._RecentParses.MIN_BYTES


@settings(max_examples=150, deadline=None)
@given(
    edits=st.lists(
        st.tuples(st.integers(0, len(TEXT)), st.integers(0, 400), st.sampled_from(SNIPPETS)),
        min_size=1,
        max_size=4,
    )
)
def test_a_parse_reusing_a_recent_one_is_the_fresh_parse(edits: list[tuple[int, int, str]]) -> None:
    parsing._RECENT.clear()
    parse_cuda(TEXT)
    text = TEXT
    for start, length, inserted in edits:
        start = min(start, len(text))
        text = text[:start] + inserted + text[start + length :]
        assert str(parse_cuda(text).root_node) == str(fresh(text).root_node)


def test_editing_a_returned_tree_leaves_the_next_parse_of_that_text_intact() -> None:
    parsing._RECENT.clear()
    tree = parse_cuda(TEXT)
    tree.edit(start_byte=0, old_end_byte=10, new_end_byte=0, start_point=(0, 0), old_end_point=(0, 10),
              new_end_point=(0, 0))  # fmt: skip
    assert str(parse_cuda(TEXT).root_node) == str(fresh(TEXT).root_node)


@given(old=st.binary(max_size=40), new=st.binary(max_size=40))
def test_the_changed_middle_lies_between_the_longest_common_prefix_and_suffix(old: bytes, new: bytes) -> None:
    start, old_end, new_end = parsing._changed_middle(old, new)
    assert old[:start] == new[:start] and old[old_end:] == new[new_end:]
    assert start <= old_end and start <= new_end
    # Neither could be longer (the suffix limited so it does not overlap the prefix).
    shorter = min(len(old), len(new))
    assert start == shorter or old[start] != new[start]
    suffix = len(old) - old_end
    assert suffix == shorter - start or old[old_end - 1] != new[new_end - 1]


BIG = bytes(range(256)) * 100  # 25,600 bytes: several of the blocks compared at a time


@given(start=st.integers(0, len(BIG)), length=st.integers(0, 20_000), inserted=st.binary(max_size=3))
def test_the_changed_middle_of_big_texts(start: int, length: int, inserted: bytes) -> None:
    new = BIG[:start] + inserted + BIG[start + length :]
    shorter = min(len(BIG), len(new))
    prefix = next((i for i in range(shorter) if BIG[i] != new[i]), shorter)
    rest = shorter - prefix
    suffix = next((i for i in range(rest) if BIG[-1 - i] != new[-1 - i]), rest)
    assert parsing._changed_middle(BIG, new) == (prefix, len(BIG) - suffix, len(new) - suffix)
