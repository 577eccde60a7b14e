"""The LSP edge's position conversions: UTF-8 byte columns (tree-sitter) and characters (compilers) to
UTF-16 code units (LSP)."""

from __future__ import annotations

from cuda_agent.server.positions import byte_position, character_range, split_lines


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
