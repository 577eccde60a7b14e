"""Parsing CUDA with tree-sitter: one parser per thread, incremental reparses, and reuse of recent parses.

A full parse of a 5,000-line file takes ~30 ms and holds the GIL all that time, so in the language server
every full parse on a worker thread stalls the event loop (hover, lens) just as long. Most parses are of a
text close to one parsed a moment ago: a candidate is the file with one kernel rewritten; its compile,
its reload and its device-side source each parse it again. So `parse_cuda` keeps the last few big texts'
trees and parses a new text as an edit of the closest one (~1 ms), which gives the tree a fresh parse
gives (tests/test_parsing.py checks that over random edits).
"""

from __future__ import annotations

import threading
from collections import deque
from collections.abc import Iterator
from dataclasses import dataclass, field
from functools import cache

import tree_sitter_cuda
from tree_sitter import Language, Node, Parser, Point, Tree


@cache
def cuda_language() -> Language:
    return Language(tree_sitter_cuda.language())


# A Parser holds mutable state and is not safe to share between threads (the language server parses on
# its event loop and in worker threads), so there is one per thread; the Language is shared.
_thread_state = threading.local()


def _parser() -> Parser:
    parser: Parser | None = getattr(_thread_state, "parser", None)
    if parser is None:
        parser = Parser(cuda_language())
        _thread_state.parser = parser
    return parser


def parse_cuda(source: str | bytes, old_tree: Tree | None = None) -> Tree:
    """Parse CUDA source. Pass `old_tree` (already `.edit()`ed to match `source`) to reparse incrementally;
    without one, a recent parse of a similar text serves as the old tree."""
    data = source.encode("utf-8") if isinstance(source, str) else source
    if old_tree is not None:
        return _parser().parse(data, old_tree)
    return _RECENT.parse(data)


def ancestors(root: Node, node: Node) -> list[Node]:
    """The nodes from `root` down to `node`'s parent, outermost first. tree-sitter finds `Node.parent` by
    descending from the root, so each costs the node's depth and climbing parent by parent from deep in a
    tree (10,000 nested namespaces or blocks) is quadratic in the depth; this is one descent."""
    path: list[Node] = []
    current: Node | None = root
    while current is not None and current != node:
        path.append(current)
        current = current.child_with_descendant(node)
    return path if current is not None else []


@dataclass(frozen=True)
class TextEdit:
    """One edit between two texts: bytes [start, old_end) of the old text (`replaced`) became
    [start, new_end) of the new one, on lines `start_line` to `old_end_line` of the old text; the lines
    after it moved by `lines_by`."""

    start: int
    old_end: int
    new_end: int
    old_end_line: int
    lines_by: int
    start_line: int
    replaced: bytes = field(repr=False)


@dataclass(frozen=True)
class Reparse:
    tree: Tree
    edit: TextEdit
    # Byte ranges of the new text whose syntax changed (`Tree.changed_ranges`).
    changed: list[tuple[int, int]]
    # From edit_in_comment: the comment the edit was in (its bytes in the new text). Then `tree` is the old
    # tree with the edit applied, not parsed: the tree a parse would give, but at the edge of that comment
    # (its nodes' `.text` is the old text's, too), so nothing may be read from it anew (EarlierRead.inert).
    comment: tuple[int, int] | None = None


def reparse(old: bytes, old_tree: Tree, data: bytes) -> Reparse:
    """`data`'s tree from `old`'s, as one edit (the changed middle between their common prefix and
    suffix): tree-sitter reparses only around it. `old_tree` itself is left as it was."""
    edit, edited = _edited(old, old_tree, data)
    tree = _parser().parse(data, edited)
    return Reparse(tree, edit, [(r.start_byte, r.end_byte) for r in edited.changed_ranges(tree)])


def edit_in_comment(
    old: bytes, old_tree: Tree, data: bytes, comment: tuple[int, int] | None = None
) -> Reparse | None:
    """`reparse` without the parse, for an edit inside one comment between declarations (typing in the
    file's header): tree-sitter's incremental parse still walks every top-level declaration after an edit
    (15 ms for a 50,000-line file's 9,000). None for any other edit. `comment`: where such a comment lies
    in `old`, when an edit before said (the old tree may not: one typed at its start is not in its node)."""
    edit, edited = _edited(old, old_tree, data)
    inside = _comment_kept(old, old_tree, data, edit, comment)
    return Reparse(edited, edit, [], inside) if inside is not None else None


def _edited(old: bytes, old_tree: Tree, data: bytes) -> tuple[TextEdit, Tree]:
    """The edit from `old` to `data`, and a copy of `old_tree` with it applied (not parsed)."""
    start, old_end, new_end = _changed_middle(old, data)
    start_point = _point(old, start)
    old_end_point = _point_after(old, start, start_point, old_end)
    new_end_point = _point_after(data, start, start_point, new_end)
    edited = old_tree.copy()
    edited.edit(
        start_byte=start,
        old_end_byte=old_end,
        new_end_byte=new_end,
        start_point=start_point,
        old_end_point=old_end_point,
        new_end_point=new_end_point,
    )
    lines_by = new_end_point.row - old_end_point.row
    edit = TextEdit(start, old_end, new_end, old_end_point.row, lines_by, start_point.row, old[start:old_end])
    return edit, edited


def _comment_kept(
    old: bytes, old_tree: Tree, data: bytes, edit: TextEdit, known: tuple[int, int] | None
) -> tuple[int, int] | None:
    """Where the comment holding the edit lies in `data`, if the edit changed only its inside and it is
    still the same comment there, between top-level declarations, in a file without syntax errors; else
    None. What lexes as that comment is checked here: no line break or backslash typed or removed (a
    line comment's end, or its continuation), `*/` neither typed nor broken, the comment's opening kept."""
    if old_tree.root_node.has_error or edit.lines_by:
        return None
    typed = data[edit.start : edit.new_end]
    if any(mark in piece for mark in (b"\n", b"\r", b"\\") for piece in (edit.replaced, typed)):
        return None
    found = known if known is not None and known[0] <= edit.start and edit.old_end <= known[1] else None
    found = found or _top_level_comment(old_tree, edit)
    if found is None:
        return None
    begin, end = found
    delta = edit.new_end - edit.old_end
    if edit.start > begin and old[edit.start - 1 : edit.start] == b"\\":
        return None  # it escaped the first byte the edit replaced; it would escape another
    if old[begin : begin + 2] == b"//":
        # Typed at its start, the bytes go to the node before it, unless spaces (its own) are in between.
        joins = edit.start == begin and begin > 0 and old[begin - 1 : begin] not in (b" ", b"\t", b"\n")
        return (begin, end + delta) if data[begin : begin + 2] == b"//" and not joins else None
    if b"cuda-agent" in old[begin:end] or b"cuda-agent" in data[begin : end + delta]:
        return None  # a spec comment (spec/source.py), or one that may become one
    if edit.start < begin + 2 or edit.old_end > end - 2 or data.find(b"*/", begin + 2) != end + delta - 2:
        return None
    line_end = data.find(b"\n", end + delta)
    rest = data[end + delta : line_end if line_end != -1 else len(data)]
    # What follows on its line would move by columns (not only bytes): read anew, then, from a parse.
    return (begin, end + delta) if not rest.strip(b" \t") else None


def _top_level_comment(tree: Tree, edit: TextEdit) -> tuple[int, int] | None:
    """The extent of the comment between top-level declarations that holds the edit's bytes, or ends
    where the edit starts (typing at a line comment's end)."""
    root = tree.root_node
    for at in (edit.start, edit.start - 1):
        node = root.descendant_for_byte_range(at, at + 1) if at >= 0 else None
        if node is None or node.type != "comment" or node.parent is None:
            continue
        if (
            node.parent.type == "translation_unit"
            and node.start_byte <= edit.start <= edit.old_end <= node.end_byte
        ):
            return node.start_byte, node.end_byte
    return None


def _changed_middle(old: bytes, new: bytes) -> tuple[int, int, int]:
    """(start, old end, new end) of the bytes between the two texts' common prefix and common suffix."""
    start = _common_length(old, new, min(len(old), len(new)), from_end=False)
    # The suffix may not reach into the prefix.
    suffix = _common_length(old, new, min(len(old), len(new)) - start, from_end=True)
    return start, len(old) - suffix, len(new) - suffix


def _common_length(old: bytes, new: bytes, limit: int, from_end: bool) -> int:
    """How many bytes (at most `limit`) the texts share at their start (or end): in stretches that double
    while they match, then by binary search inside the first that does not, each byte compared about
    twice. A comparison is `startswith` of a memoryview, a memcmp in place (slices copied both texts: a
    50,000-line file's 2 MB took 0.6 ms an edit)."""
    view = memoryview(new)

    def same(n_from: int, n_to: int) -> bool:
        """Whether bytes n_from to n_to from the start (or the end) are the same."""
        if from_end:
            return old.startswith(view[len(new) - n_to : len(new) - n_from], len(old) - n_to)
        return old.startswith(view[n_from:n_to], n_from)

    done, step = 0, 4096
    while done < limit and same(done, min(done + step, limit)):
        done, step = min(done + step, limit), step * 2
    low, high = done, min(done + step, limit)
    while low < high:  # the first `low` bytes are the same; the first `high + 1` are not
        middle = (low + high + 1) // 2
        if same(low, middle):
            low = middle
        else:
            high = middle - 1
    return low


def _point(data: bytes, offset: int) -> Point:
    row = data.count(b"\n", 0, offset)
    return Point(row, offset - (data.rfind(b"\n", 0, offset) + 1))


def _point_after(data: bytes, start: int, start_point: Point, offset: int) -> Point:
    """`_point(data, offset)` for an offset at or after `start`, whose point is known: counts the lines
    in between, not all of those before."""
    line_start = data.rfind(b"\n", start, offset)
    if line_start == -1:
        return Point(start_point.row, start_point.column + offset - start)
    return Point(start_point.row + data.count(b"\n", start, offset), offset - (line_start + 1))


class _RecentParses:
    """The trees of the last few big texts parsed. A new text that shares most of its bytes with one of
    them (all but one changed stretch) is parsed as an edit of it."""

    # Below this a full parse takes ~2 ms: less than looking for a base is worth.
    MIN_BYTES = 16 * 1024
    SIZE = 4

    def __init__(self) -> None:
        self._entries: deque[tuple[bytes, Tree]] = deque(maxlen=self.SIZE)
        self._lock = threading.Lock()

    def parse(self, data: bytes) -> Tree:
        if len(data) < self.MIN_BYTES:
            return _parser().parse(data)
        with self._lock:
            entries = list(self._entries)
        if (same := next((tree for old, tree in entries if old == data), None)) is not None:
            return same.copy()
        tree = self._from_recent(data, entries) or _parser().parse(data)
        with self._lock:
            self._entries.append((data, tree))
        # A copy: a caller may `.edit()` the tree it gets (cheap: trees share their nodes).
        return tree.copy()

    def clear(self) -> None:
        with self._lock:
            self._entries.clear()

    def _from_recent(self, data: bytes, entries: list[tuple[bytes, Tree]]) -> Tree | None:
        best: tuple[int, bytes, Tree] | None = None
        for old, tree in reversed(entries):  # the latest first: most often the text this one came from
            start, old_end, _ = _changed_middle(old, data)
            kept = start + len(old) - old_end
            if best is None or kept > best[0]:
                best = (kept, old, tree)
            if kept >= len(data) * 0.9:
                break
        # An edit of a text that kept less than most of its bytes saves little over a fresh parse.
        if best is None or best[0] < len(data) // 2:
            return None
        return reparse(best[1], best[2], data).tree


_RECENT = _RecentParses()


Monomial = tuple[str, ...]


def linear_form(node: Node) -> dict[Monomial, int] | None:
    """An integer index as a sum of products of names: `(y - 1) * W + x` -> {(W, y): 1, (W,): -1, (x,): 1}.
    None when it is not a polynomial in names and integer literals (calls, subscripts, divisions)."""
    while node.type == "parenthesized_expression" and node.named_child_count == 1:
        node = node.named_children[0]
    if node.type == "number_literal" and node.text is not None:
        text = node.text.decode().rstrip("uUlL")
        return {(): int(text, 0)} if text.isdigit() or text.startswith("0x") else None
    if node.type == "identifier" and node.text is not None:
        return {(node.text.decode(),): 1}
    if node.type == "cast_expression" and (value := node.child_by_field_name("value")) is not None:
        return linear_form(value)
    if node.type == "unary_expression":
        op, arg = node.child_by_field_name("operator"), node.child_by_field_name("argument")
        inner = linear_form(arg) if arg is not None else None
        if op is None or inner is None or op.type not in "+-":
            return None
        return {m: -c for m, c in inner.items()} if op.type == "-" else inner
    if node.type != "binary_expression":
        return None
    op = node.child_by_field_name("operator")
    left, right = node.child_by_field_name("left"), node.child_by_field_name("right")
    a = linear_form(left) if left is not None else None
    b = linear_form(right) if right is not None else None
    if op is None or a is None or b is None:
        return None
    result: dict[Monomial, int] = {}
    if op.type in ("+", "-"):
        sign = 1 if op.type == "+" else -1
        for m, c in a.items():
            result[m] = result.get(m, 0) + c
        for m, c in b.items():
            result[m] = result.get(m, 0) + sign * c
    elif op.type == "*":
        for ma, ca in a.items():
            for mb, cb in b.items():
                key = tuple(sorted(ma + mb))
                result[key] = result.get(key, 0) + ca * cb
    else:
        return None
    return {m: c for m, c in result.items() if c != 0}


def walk(node: Node) -> Iterator[Node]:
    """The node and every node under it (comments too), in source order; iterative, so a deeply nested
    expression (a generated sum of a thousand terms) cannot exhaust Python's recursion limit."""
    stack = [node]
    while stack:
        current = stack.pop()
        yield current
        stack.extend(reversed(current.children))
