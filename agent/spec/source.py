"""The CUDA side of specs: find `/* cuda-agent ... */` comments with tree-sitter and map TOML positions
back to the .cu file (0-based lines, UTF-8 byte columns, as tree-sitter and `Span` count them)."""

from __future__ import annotations

import bisect
import itertools
from collections.abc import Sequence
from dataclasses import dataclass
from functools import cached_property

import tree_sitter
from cuda_agent.agent.kernels import Span
from cuda_agent.agent.parsing import parse_cuda

MARKER = "cuda-agent"


class LineIndex:
    """Converts between byte offsets and (line, byte column) in one text."""

    def __init__(self, data: bytes) -> None:
        self.data = data

    @cached_property
    def starts(self) -> list[int]:
        # From the lines' lengths, all in C (split, map, accumulate): a loop over every byte of a large file
        # took ~17 ms on each analysis of each edit. Built on first use: most files have few spec comments.
        lengths = map(len, self.data.split(b"\n")[:-1])
        return list(itertools.accumulate(map((1).__add__, lengths), initial=0))

    def offset(self, line: int, column: int) -> int:
        return self.starts[min(line, len(self.starts) - 1)] + column

    def point(self, offset: int) -> tuple[int, int]:
        line = bisect.bisect_right(self.starts, offset) - 1
        return line, offset - self.starts[line]

    def span(self, start: tuple[int, int], end: tuple[int, int]) -> Span:
        return Span(self.offset(*start), self.offset(*end), start[0], start[1], end[0], end[1])


@dataclass(frozen=True)
class SpecComment:
    """The TOML inside one spec comment and where each of its lines starts in the .cu file."""

    toml: str
    origins: tuple[tuple[int, int], ...]  # per TOML line: (file line, file byte column) of its first byte
    span: Span  # the whole comment
    marker: Span  # "/* cuda-agent", where errors about the comment as a whole are shown

    def to_file(self, row: int, column: int) -> tuple[int, int]:
        """File position of a TOML (0-based row, byte column) position."""
        row = max(0, min(row, len(self.origins) - 1))
        line, start = self.origins[row]
        return line, start + column


def find_spec_comments(
    source: str | bytes,
    tree: tree_sitter.Tree | None = None,
    index: LineIndex | None = None,
    markers: Sequence[int] | None = None,
) -> list[SpecComment]:
    """Every block comment that starts with `/* cuda-agent`, in file order. `tree`: the file's parse;
    `index`: its line index; `markers`: where the marker occurs (`marker_offsets`), when the caller has
    them."""
    data = source.encode() if isinstance(source, str) else source
    tree = tree or parse_cuda(data)
    index = index or LineIndex(data)
    found = _marked_comments(tree, marker_offsets(data) if markers is None else markers)
    comments = [_spec_comment(node, index) for node in found]
    return [comment for comment in comments if comment is not None]


_MARKER = MARKER.encode()


def marker_offsets(data: bytes, start: int = 0, end: int | None = None) -> list[int]:
    """Where the marker occurs in `data` (that starts in [start, end)), ascending."""
    found, end = [], len(data) if end is None else end
    at = data.find(_MARKER, start, end + len(_MARKER) - 1)
    while at != -1:
        found.append(at)
        at = data.find(_MARKER, at + len(_MARKER), end + len(_MARKER) - 1)
    return found


def markers_after_edit(
    markers: Sequence[int], data: bytes, start: int, old_end: int, new_end: int
) -> list[int]:
    """`marker_offsets(data)` for the text an edit of bytes [start, old_end) into [start, new_end) made from
    one whose markers were `markers`: those away from the edit kept (moved), the edit's surroundings
    searched again (a search of a 50,000-line file took 0.8 ms an edit)."""
    reach = len(_MARKER) - 1  # a marker starting this far before the edit may overlap it
    before = [at for at in markers[: bisect.bisect_left(markers, start - reach)]]
    after = markers[bisect.bisect_left(markers, old_end) :]
    around = marker_offsets(data, max(0, start - reach), new_end)
    delta = new_end - old_end
    return before + around + [at + delta for at in after]


def _marked_comments(tree: tree_sitter.Tree, markers: Sequence[int]) -> list[tree_sitter.Node]:
    """The comment nodes that contain the marker, in file order: found from the marker's occurrences
    (bytes.find) rather than by visiting every comment of the file (a query over a 5,000-line file took
    10 ms, on every edit the language server analyses)."""
    found: dict[int, tree_sitter.Node] = {}
    for at in markers:
        node = tree.root_node.descendant_for_byte_range(at, at + len(_MARKER))
        if node is not None and node.type == "comment":
            found.setdefault(node.start_byte, node)
    return [found[start] for start in sorted(found)]


def _spec_comment(node: tree_sitter.Node, index: LineIndex) -> SpecComment | None:
    # Text, not bytes: columns are still counted in UTF-8 bytes below, via .encode().
    text = index.data[node.start_byte : node.end_byte].decode("utf-8", errors="replace")
    if not text.startswith("/*"):
        return None
    after_open = text[2:].lstrip(" \t*")  # `/* cuda-agent`, `/*cuda-agent`, `/** cuda-agent`
    if not after_open.startswith(MARKER):
        return None
    rest = after_open[len(MARKER) :]
    if rest and rest[0] not in " \t\r\n":
        return None  # `/* cuda-agentish` is someone else's comment
    body_start = node.start_byte + len(text[: len(text) - len(rest)].encode())
    body = rest[:-2] if rest.endswith("*/") else rest

    # Positions from the comment node's own (the line index of a big file is built only when needed).
    opening = index.data[node.start_byte : body_start]
    line = node.start_point.row + opening.count(b"\n")
    if b"\n" in opening:  # `/*` alone on its line, the marker below it
        column = len(opening) - (opening.rfind(b"\n") + 1)
    else:
        column = node.start_point.column + len(opening)
    marker_end = (line, column)
    lines, origins = [], []
    for number, raw in enumerate(body.split("\n")):
        if number > 0:
            line, column = line + 1, 0
            # Javadoc-style decoration (` * rows = 4`): no TOML line starts with `*`, so dropping it is safe.
            stripped = raw.lstrip(" \t")
            if stripped.startswith("*"):
                cut = len(raw) - len(stripped) + 1 + (1 if stripped[1:2] == " " else 0)
                raw, column = raw[cut:], len(raw[:cut].encode())
        lines.append(raw)
        origins.append((line, column))
    start, end = node.start_point, node.end_point
    return SpecComment(
        toml="\n".join(lines),
        origins=tuple(origins),
        span=Span(node.start_byte, node.end_byte, start.row, start.column, end.row, end.column),
        marker=Span(node.start_byte, body_start, start.row, start.column, *marker_end),
    )
