"""Text written into a user's file (a rewrite, a spec) takes the file's line endings."""

from __future__ import annotations

import pytest

from cuda_agent.line_endings import in_line_endings_of


@pytest.mark.parametrize(
    ("file_text", "expected"),
    [
        ("a\r\nb\r\n", "x\r\ny\r\nz\r\n"),  # a CRLF file: every inserted line ends in CRLF, none twice
        ("a\nb\n", "x\ny\r\nz\n"),  # an LF file: left as written
        ("a\r\nb\n", "x\ny\r\nz\n"),  # mixed already: nothing to follow, left as written
        ("no line end", "x\ny\r\nz\n"),
    ],
)
def test_inserted_lines_follow_the_files_line_endings(file_text: str, expected: str) -> None:
    assert in_line_endings_of(file_text, "x\ny\r\nz\n") == expected
