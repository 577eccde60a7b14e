"""Text written into a user's file in the file's own line endings. Rewrites and specs are made with `\n`;
in a CRLF file (Windows) their lines must end in `\r\n` too, not leave the file with lines of both kinds."""

from __future__ import annotations

import re

_LONE_LF = re.compile(r"(?<!\r)\n")


def in_line_endings_of(file_text: str, text: str) -> str:
    """`text` with its `\n` line ends as `file_text` ends its lines: `\r\n` when every line there does."""
    if "\r\n" in file_text and file_text.count("\n") == file_text.count("\r\n"):
        return _LONE_LF.sub("\r\n", text)
    return text
