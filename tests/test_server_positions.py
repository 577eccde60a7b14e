"""The LSP edge's position conversions: UTF-8 byte columns (tree-sitter) and characters (compilers) to
UTF-16 code units (LSP)."""

from __future__ import annotations

import re

from cuda_agent.server.positions import apply_change, byte_position, character_range, split_lines
from hypothesis import given
from hypothesis import strategies as st
from lsprotocol import types


def test_byte_columns_become_utf16_units():
    lines = split_lines("// é 😀 x\nint y;")
    x_bytes = len("// é 😀 ".encode())
    assert byte_position(lines, 0, x_bytes).character == len("// é ") + 2 + 1  # the emoji is 2 units
    assert byte_position(lines, 1, 4).character == 4
    assert byte_position(lines, 9, 0).line == 1  # a line past the end is clamped, not an IndexError


def test_compiler_character_columns_cover_the_word():
    lines = split_lines("  y = 😀bad_name + 1;")
    found = character_range(lines, 0, lines[0].index("bad_name"))
    assert (found.start.character, found.end.character) == (8, 16)


def _positions(text: str) -> dict[tuple[int, int], int]:
    """Every LSP position in `text` (lines end at \\n, \\r\\n or \\r; UTF-16 units) and its string index,
    by walking the text."""
    found, line, units, index = {}, 0, 0, 0
    for part in re.findall(r"\r\n|[^\r\n]|\n|\r", text):
        found[(line, units)] = index
        if part in ("\r\n", "\n", "\r"):
            line, units = line + 1, 0
        else:
            units += 2 if ord(part) > 0xFFFF else 1
        index += len(part)
    found[(line, units)] = index
    return found


PIECES = ["a", "é", "😀", "\n", "\r", "\r\n", "\f", "\v", "\u2028", "\x85", " "]
TEXT = st.lists(st.sampled_from(PIECES), max_size=30).map("".join)


@given(text=TEXT, start=st.integers(0, 60), end=st.integers(0, 60), inserted=st.sampled_from(["", "X", "\n"]))
def test_a_change_replaces_exactly_the_range_the_editor_named(text: str, start: int, end: int, inserted: str):
    positions = sorted(_positions(text).items(), key=lambda item: item[1])
    first, at = positions[min(start, len(positions) - 1)]
    last, until = positions[min(end, len(positions) - 1)]
    if at > until:
        (first, at), (last, until) = (last, until), (first, at)
    change = types.TextDocumentContentChangePartial(
        range=types.Range(types.Position(*first), types.Position(*last)), text=inserted
    )
    assert apply_change(text, change) == text[:at] + inserted + text[until:]


def test_positions_past_a_line_or_the_text_are_clamped():
    change = types.TextDocumentContentChangePartial(
        range=types.Range(types.Position(0, 99), types.Position(7, 0)), text="!"
    )
    assert apply_change("ab\ncd", change) == "ab!"
