"""Kernel discovery: every `__global__` function and `<<<>>>` launch site in a CUDA file, via tree-sitter.

Positions follow tree-sitter: lines and columns are 0-based and columns count UTF-8 bytes. The language
server converts to UTF-16 code units with `utf16_column` (and back with `utf8_column`) at its edge.

What tree-sitter cannot see, we do not guess: a kernel whose `__global__` comes from a macro
(`#define KERNEL(n) __global__ void n(...)`) or a launch written inside a macro body is not found.
"""

from __future__ import annotations

import bisect
import itertools
import operator
from collections.abc import Callable, Iterable, Iterator, Sequence
from dataclasses import dataclass, fields, replace
from functools import cached_property, partial
from operator import attrgetter

from cuda_agent.agent.memo import BoundedMemo, MadeOnRead
from cuda_agent.agent.parsing import TextEdit, ancestors, parse_cuda
from tree_sitter import Node, Point, Tree


@dataclass(frozen=True)
class Span:
    """A source range. Lines and columns are 0-based; columns are UTF-8 byte offsets in the line."""

    start_byte: int
    end_byte: int
    start_line: int
    start_column: int
    end_line: int
    end_column: int

    def contains(self, line: int, column: int) -> bool:
        """Whether the position (0-based line, UTF-8 byte column) lies in the range, both ends included,
        so a cursor just after the closing brace still counts as inside."""
        return (self.start_line, self.start_column) <= (line, column) <= (self.end_line, self.end_column)


@dataclass(frozen=True)
class Accessor:
    """A PyTorch packed tensor accessor passed by value (`torch::PackedTensorAccessor32<scalar_t, 2,
    torch::RestrictPtrTraits> x`): a data pointer with the tensor's sizes and strides beside it, indexed
    `x[i][j]`, sized `x.size(1)`. The kernel receives the struct; its element type is the parameter's."""

    rank: int
    index_bits: int  # 32 or 64: the width of its sizes, strides and indices
    template: str  # as written: "PackedTensorAccessor32"


@dataclass(frozen=True)
class Parameter:
    name: str
    type: str  # base type as written, without const/pointer: "float", "half", "T" (an accessor's element)
    is_pointer: bool
    is_const: bool  # const pointee (for pointers) or const value
    is_restrict: bool
    text: str  # the parameter as written
    span: Span
    # `*`s plus array dimensions: 1 for `float* x` and `float x[4]`, 2 for `float** x`. Array parameters
    # decay to pointers in C++, so they count as pointers here too.
    pointer_depth: int = 0
    accessor: Accessor | None = None  # a PyTorch packed accessor: a buffer, though not a pointer

    @property
    def is_buffer(self) -> bool:
        return self.is_pointer or self.accessor is not None


@dataclass(frozen=True)
class TemplateParameter:
    name: str
    kind: str  # "type" (typename/class T, also template-template parameters) or "value" (int BLOCK)
    text: str
    default: str | None = None  # "128" for `int BLOCK = 128`


@dataclass(frozen=True)
class LaunchSite:
    kernel: str  # the called name, without template arguments
    template_arguments: str | None  # "float, 256" for k<float, 256><<<...>>>
    config: tuple[str, ...]  # grid, block[, shared bytes[, stream]] as written
    arguments: tuple[str, ...]
    span: Span  # the whole call expression
    config_span: Span  # the text between <<< and >>>


@dataclass(frozen=True)
class KernelPositions:
    """Where a kernel's parts were when it was read."""

    span: Span  # the whole definition, template<...> and specifiers included
    body_span: Span  # the compound statement { ... }
    name_span: Span
    parameters: tuple[Parameter, ...]


@dataclass(frozen=True, eq=False)
class Kernel:
    name: str
    template_parameters: tuple[TemplateParameter, ...]
    extern_c: bool
    launch_bounds: str | None  # the text inside __launch_bounds__(...)
    has_errors: bool  # tree-sitter recovered from a syntax error inside it
    read: KernelPositions
    # "float, 64" for an explicit specialisation `template <> __global__ void k<float, 64>(...)`.
    template_arguments: str | None = None
    # Enclosing namespaces and any `ns::` written before the name, outermost first: "ops::detail".
    namespace: str = ""
    # (bytes, lines) the unchanged kernel has moved since it was read, by edits above it. Its spans are
    # shifted when asked for: rebuilding every span of a 5,000-line file's kernels took 6 ms an edit.
    moved_by: tuple[int, int] = (0, 0)

    @cached_property
    def span(self) -> Span:
        return shifted(self.read.span, self.moved_by)

    @cached_property
    def body_span(self) -> Span:
        return shifted(self.read.body_span, self.moved_by)

    @cached_property
    def name_span(self) -> Span:
        return shifted(self.read.name_span, self.moved_by)

    @cached_property
    def parameters(self) -> tuple[Parameter, ...]:
        if self.moved_by == (0, 0):
            return self.read.parameters
        return tuple(replace(p, span=shifted(p.span, self.moved_by)) for p in self.read.parameters)

    def name_contains(self, line: int, column: int) -> bool:
        """`name_span.contains`, ruling out other lines without building the span (a hover asks every
        kernel of the file, each new after an edit)."""
        return _on_lines(self.read.name_span, self.moved_by, line) and self.name_span.contains(line, column)

    def contains(self, line: int, column: int) -> bool:
        """`span.contains`, likewise."""
        return _on_lines(self.read.span, self.moved_by, line) and self.span.contains(line, column)

    @property
    def start_byte(self) -> int:
        """Where the definition starts (`span.start_byte`, without building the span)."""
        return self.read.span.start_byte + self.moved_by[0]

    @property
    def end_byte(self) -> int:
        return self.read.span.end_byte + self.moved_by[0]

    @property
    def start_line(self) -> int:
        """`span.start_line`, likewise."""
        return self.read.span.start_line + self.moved_by[1]

    @property
    def qualified_name(self) -> str:
        """The name as C++ looks it up from the global scope (what NVRTC name expressions need)."""
        return f"{self.namespace}::{self.name}" if self.namespace else self.name

    def _identity(self) -> tuple[object, ...]:
        """What the kernel is, wherever it was read: a kernel read anew and one moved compare equal."""
        return (
            self.name, self.parameters, self.template_parameters, self.extern_c, self.launch_bounds,
            self.span, self.body_span, self.name_span, self.has_errors, self.template_arguments,
            self.namespace,
        )  # fmt: skip

    def __eq__(self, other: object) -> bool:
        return isinstance(other, Kernel) and self._identity() == other._identity()

    def __hash__(self) -> int:
        return hash(self._identity())


def _on_lines(read: Span, moved_by: tuple[int, int], line: int) -> bool:
    return read.start_line + moved_by[1] <= line <= read.end_line + moved_by[1]


def shifted(span: Span, by: tuple[int, int]) -> Span:
    """The span `by` (bytes, lines) further down the file; columns stay (the kernel's text is the same)."""
    bytes_by, lines_by = by
    if bytes_by == 0 and lines_by == 0:
        return span
    return Span(span.start_byte + bytes_by, span.end_byte + bytes_by, span.start_line + lines_by,
                span.start_column, span.end_line + lines_by, span.end_column)  # fmt: skip


def _tokens(root: Node, data: bytes, token: str) -> Iterator[Node]:
    """The tree's tokens of one kind (`__global__`, `<<<`), in source order.

    A tree walk visits every node (80,000 for a 5,000-line file; ~10 ms even as a C-side query). Instead
    this finds the token's bytes and asks the tree what sits there: only a real token counts, not the
    same letters in a comment, a string or a macro body, so the tree still decides what is code."""
    needle = token.encode()
    offset = data.find(needle)
    while offset != -1:
        node = root.descendant_for_byte_range(offset, offset + len(needle))
        if node is not None and node.type == token and not node.is_named:
            yield node
        offset = data.find(needle, offset + len(needle))


# -- positions -----------------------------------------------------------------------------------------


def node_span(node: Node) -> Span:
    """The span of a tree-sitter node."""
    return _span(node, node)


def _span(first: Node, last: Node) -> Span:
    """From the start of `first` to the end of `last`."""
    return _points_span(first.start_byte, first.start_point, last.end_byte, last.end_point)


def _gap_span(before: Node, after: Node) -> Span:
    """From the end of `before` to the start of `after`: the text between two tokens."""
    return _points_span(before.end_byte, before.end_point, after.start_byte, after.start_point)


def _points_span(start_byte: int, start: Point, end_byte: int, end: Point) -> Span:
    return Span(start_byte, end_byte, start.row, start.column, end.row, end.column)


def utf16_column(line_text: str, byte_column: int) -> int:
    """The UTF-16 code-unit column (what LSP positions count) of a UTF-8 byte column in `line_text`.
    A byte column inside a multi-byte character counts up to that character's start."""
    prefix = line_text.encode("utf-8")[:byte_column].decode("utf-8", errors="ignore")
    return len(prefix.encode("utf-16-le")) // 2


def utf8_column(line_text: str, utf16_col: int) -> int:
    """The UTF-8 byte column of a UTF-16 code-unit column in `line_text` (the inverse of `utf16_column`).
    A column past the end of the line is clamped to the line's end, as LSP asks."""
    units = 0
    for index, char in enumerate(line_text):
        if units >= utf16_col:
            return len(line_text[:index].encode("utf-8"))
        units += 2 if ord(char) > 0xFFFF else 1
    return len(line_text.encode("utf-8"))


# -- kernels -------------------------------------------------------------------------------------------


@dataclass(frozen=True)
class EarlierRead:
    """The kernels of the text before one edit, the edit, and the byte ranges of the new text whose syntax
    tree-sitter found changed (`Tree.changed_ranges`): a kernel that neither touches is the same kernel."""

    kernels: Sequence[Kernel]
    edit: TextEdit
    changed: Sequence[tuple[int, int]]
    # The edit was inside a comment between declarations and the tree was not parsed again
    # (parsing.edit_in_comment): what was found before stands, moved; what would be read anew raises
    # StaleTree, and the caller parses.
    inert: bool = False


class StaleTree(Exception):
    """Raised where an edit's tree, not parsed again (EarlierRead.inert), would have to be read."""


def find_kernels(
    source: str | bytes, tree: Tree | None = None, earlier: EarlierRead | None = None
) -> Sequence[Kernel]:
    """Every `__global__` function definition, in source order. Declarations without a body and explicit
    instantiations (`template __global__ void k<float>(...);`) are not definitions and are skipped.
    `earlier`: what the previous text held, so that only kernels around an edit are read again; then the
    answer is a KernelRuns, whose kernels the edit left alone are the earlier ones, moved when read."""
    data = source.encode("utf-8") if isinstance(source, str) else source
    root = (tree or parse_cuda(data)).root_node
    if earlier is not None:
        runs = KernelRuns.of(earlier.kernels)
        if runs.monotone:
            return _runs_after_edit(root, data, earlier, runs)
        if earlier.inert:
            raise StaleTree("kernels nest")
        return KernelRuns.of(_after_edit(root, data, earlier))
    return _definitions(root, data, _tokens(root, data, "__global__"))


def _definitions(root: Node, data: bytes, tokens: Iterable[Node]) -> list[Kernel]:
    """The definitions the tokens belong to, each once (`__global__ /*a*/ __global__ void k()` has two)."""
    definitions = {
        token.parent.start_byte: token.parent
        for token in tokens
        if token.parent is not None and token.parent.type == "function_definition"
    }
    return [
        _known_kernel(definition, data, ancestors(root, definition)) for definition in definitions.values()
    ]


def _after_edit(root: Node, data: bytes, earlier: EarlierRead) -> list[Kernel]:
    """The earlier kernels the edit left alone, moved (on a 5,000-line file, reading every kernel's place
    in the tree again took most of an edit's analysis), and the kernels read anew where the text or its
    syntax changed. A kernel with syntax errors, or on the edit's last line (its columns move), is read
    anew too.

    Besides moving the kernels below the edit, the cost is in what the edit touches: the kernels that
    overlap a changed range are found by bisection, not by testing every kernel against every range."""
    edit = earlier.edit
    delta = edit.new_end - edit.old_end
    dirty = [(edit.start, edit.new_end), *earlier.changed]
    # Each kernel left in place or moved: (kernel, its range in the new text, moved), in source order.
    placed: list[tuple[Kernel, int, int, bool]] = []
    for kernel in earlier.kernels:
        start = kernel.start_byte
        end = start + kernel.read.span.end_byte - kernel.read.span.start_byte
        if end < edit.start:
            placed.append((kernel, start, end, False))
        elif start > edit.old_end and kernel.read.span.start_line + kernel.moved_by[1] > edit.old_end_line:
            placed.append((kernel, start + delta, end + delta, True))
        else:
            dirty.append((min(start, edit.start), max(end + delta, edit.new_end)))
    starts, ends = [start for _, start, _, _ in placed], [end for _, _, end, _ in placed]
    # Kernels may nest (a __global__ member of a local struct, or error recovery): the running maximum of
    # the ends rules out, by bisection, the kernels that end before a range.
    furthest = list(itertools.accumulate(ends, max))
    reread = {index for index, (kernel, _, _, _) in enumerate(placed) if kernel.has_errors}
    dirty += [(starts[index], ends[index]) for index in reread]
    pending = list(dirty)
    while pending:  # a kernel read anew widens what is read anew, until nothing more is
        low, high = pending.pop()
        for index in range(bisect.bisect_left(furthest, low), bisect.bisect_right(starts, high)):
            if index not in reread and low <= ends[index]:
                reread.add(index)
                pending.append((starts[index], ends[index]))
                dirty.append((starts[index], ends[index]))
    fresh = _definitions(root, data, _tokens_within(root, data, "__global__", dirty))
    fresh_starts = {kernel.start_byte for kernel in fresh}
    found = [
        _moved(kernel, delta, edit.lines_by) if moved else kernel
        for index, (kernel, start, _, moved) in enumerate(placed)
        if index not in reread and start not in fresh_starts
    ]
    # The kept kernels are in source order: the few read anew go in by bisection.
    start_byte = attrgetter("start_byte")
    for kernel in sorted(fresh, key=start_byte):
        found.insert(bisect.bisect_left(found, kernel.start_byte, key=start_byte), kernel)
    return found


_KERNEL_FIELDS = tuple(field.name for field in fields(Kernel) if field.name != "moved_by")


def _moved(kernel: Kernel, bytes_by: int, lines_by: int) -> Kernel:
    """The same kernel, further down (or up) the file. Filled in directly, without the spans the original
    built on demand: this runs for every kernel below an edit, and the dataclass's frozen __init__ took
    three times as long."""
    moved = object.__new__(Kernel)
    slots, own = moved.__dict__, kernel.__dict__
    for name in _KERNEL_FIELDS:
        slots[name] = own[name]
    slots["moved_by"] = (kernel.moved_by[0] + bytes_by, kernel.moved_by[1] + lines_by)
    return moved


# -- kernel runs ---------------------------------------------------------------------------------------


class KernelBlock:
    """Kernels read together, in source order, with what was found for them (`payload`: opaque here, the
    analysis's targets) and their positions as lists to bisect on. A block is never changed: after an edit,
    a KernelRuns says how far each stretch of it has moved since."""

    def __init__(self, kernels: Sequence[Kernel], payload: object = None) -> None:
        self.kernels = tuple(kernels)
        self.payload = payload
        self.start_bytes = [kernel.start_byte for kernel in self.kernels]
        self.end_bytes = [kernel.end_byte for kernel in self.kernels]
        self.start_lines = [kernel.start_line for kernel in self.kernels]
        self.end_lines = [kernel.read.span.end_line + kernel.moved_by[1] for kernel in self.kernels]
        self.errors = [index for index, kernel in enumerate(self.kernels) if kernel.has_errors]
        # Whether no kernel overlaps the next (they nest inside a broken kernel, or as a local struct's
        # member): then the starts and the ends both ascend, and one bisection finds what holds a position.
        self.monotone = all(map(operator.le, self.end_bytes, self.start_bytes[1:]))
        self._names: dict[str, list[int]] | None = None

    def named(self, name: str) -> list[int]:
        """The indices of the kernels called `name`, ascending."""
        if self._names is None:
            names: dict[str, list[int]] = {}
            for index, kernel in enumerate(self.kernels):
                names.setdefault(kernel.name, []).append(index)
            self._names = names
        return self._names.get(name, [])


@dataclass(frozen=True)
class KernelRun:
    """The kernels `lo` to `hi` (exclusive) of a block, each `bytes_by` bytes and `lines_by` lines further
    down the file than the block has them."""

    block: KernelBlock
    lo: int
    hi: int
    bytes_by: int = 0
    lines_by: int = 0

    def holds(self, name: str) -> bool:
        """Whether one of its kernels is called `name`."""
        found = self.block.named(name)
        at = bisect.bisect_left(found, self.lo)
        return at < len(found) and found[at] < self.hi

    def moved(self, bytes_by: int, lines_by: int, lo: int | None = None, hi: int | None = None) -> KernelRun:
        lo, hi = self.lo if lo is None else lo, self.hi if hi is None else hi
        return KernelRun(self.block, lo, hi, self.bytes_by + bytes_by, self.lines_by + lines_by)


class KernelRuns(MadeOnRead[Kernel]):
    """A file's kernels in source order, as runs of blocks read by earlier analyses: an edit moves the
    kernels below it by changing a run's offset, not by making every kernel again (2,700 of them in a
    50,000-line file took most of an edit's analysis). A kernel is made, moved, when asked for."""

    def __init__(self, runs: Sequence[KernelRun]) -> None:
        super().__init__()
        self.runs = tuple(run for run in runs if run.hi > run.lo)
        self._offsets = list(itertools.accumulate((run.hi - run.lo for run in self.runs), initial=0))
        # In order when each block is and each run ends before the next starts.
        self.monotone = all(run.block.monotone for run in self.runs) and all(
            before.block.end_bytes[before.hi - 1] + before.bytes_by
            <= after.block.start_bytes[after.lo] + after.bytes_by
            for before, after in itertools.pairwise(self.runs)
        )

    @classmethod
    def of(cls, kernels: Sequence[Kernel], payload: object = None) -> KernelRuns:
        """`kernels` as runs: itself if it is one, else one block of them."""
        if isinstance(kernels, KernelRuns):
            return kernels
        block = KernelBlock(kernels, payload)
        return cls([KernelRun(block, 0, len(block.kernels))])

    def __len__(self) -> int:
        return self._offsets[-1]

    def _make(self, index: int) -> Kernel:
        run, at = self.locate(index)
        return _moved_by(run.block.kernels[at], run.bytes_by, run.lines_by)

    def __iter__(self) -> Iterator[Kernel]:
        made, index = self._made, 0
        for run in self.runs:
            for at in range(run.lo, run.hi):
                kernel = made.get(index)
                if kernel is None:
                    kernel = made[index] = _moved_by(run.block.kernels[at], run.bytes_by, run.lines_by)
                yield kernel
                index += 1

    def locate(self, index: int) -> tuple[KernelRun, int]:
        """The run holding the kernel at `index`, and the kernel's index in the run's block."""
        number = bisect.bisect_right(self._offsets, index) - 1
        run = self.runs[number]
        return run, run.lo + index - self._offsets[number]

    def first_of(self, number: int) -> int:
        """The index of the run `number`'s first kernel."""
        return self._offsets[number]

    def start_byte(self, index: int) -> int:
        run, at = self.locate(index)
        return run.block.start_bytes[at] + run.bytes_by

    def end_byte(self, index: int) -> int:
        run, at = self.locate(index)
        return run.block.end_bytes[at] + run.bytes_by

    def start_line(self, index: int) -> int:
        run, at = self.locate(index)
        return run.block.start_lines[at] + run.lines_by

    def end_line(self, index: int) -> int:
        run, at = self.locate(index)
        return run.block.end_lines[at] + run.lines_by

    def named(self, name: str) -> Iterator[int]:
        """The indices of the kernels called `name`, ascending, from each block's index of names."""
        for number, run in enumerate(self.runs):
            found = run.block.named(name)
            for at in found[bisect.bisect_left(found, run.lo) : bisect.bisect_left(found, run.hi)]:
                yield self._offsets[number] + at - run.lo

    def on_line(self, line: int) -> range:
        """The indices of the kernels that may span the (0-based) line: all of them that do, and in a file
        whose kernels nest, some that end before it (the caller checks each)."""
        if not self.monotone:
            return self._nested_index.on_line(line)
        first = _first_index(0, len(self), lambda index: self.end_line(index) >= line)
        past = _first_index(first, len(self), lambda index: self.start_line(index) > line)
        return range(first, past)

    @cached_property
    def _nested_index(self) -> _LineIndex:
        starts = [line + run.lines_by for run in self.runs for line in run.block.start_lines[run.lo : run.hi]]
        ends = [line + run.lines_by for run in self.runs for line in run.block.end_lines[run.lo : run.hi]]
        return _LineIndex(starts, ends)


class _LineIndex:
    """Each kernel's first line, and the furthest last line of it and the kernels before it (kernels can
    nest, inside a broken one), in source order."""

    def __init__(self, starts: list[int], ends: list[int]) -> None:
        self.starts, self.furthest = starts, list(itertools.accumulate(ends, max))

    def on_line(self, line: int) -> range:
        first = bisect.bisect_left(self.furthest, line)
        return range(first, max(first, bisect.bisect_right(self.starts, line)))


def _first_index(low: int, high: int, holds: Callable[[int], bool]) -> int:
    """The first index in [low, high) where `holds` (false, then true, along the indices), else high."""
    while low < high:
        middle = (low + high) // 2
        if holds(middle):
            high = middle
        else:
            low = middle + 1
    return low


def _moved_by(kernel: Kernel, bytes_by: int, lines_by: int) -> Kernel:
    return kernel if bytes_by == 0 and lines_by == 0 else _moved(kernel, bytes_by, lines_by)


def _runs_after_edit(root: Node, data: bytes, earlier: EarlierRead, runs: KernelRuns) -> KernelRuns:
    """`_after_edit` for kernels in order (none nests in another), as runs: the kernels the edit touches
    are found by bisection, read anew with those around the changed ranges and those with syntax errors,
    and every other stretch of kernels is kept as a run, moved by the edit if below it. What this costs
    is in what the edit touches, and the number of runs, not in the number of kernels."""
    edit = earlier.edit
    count = len(runs)
    # The earlier kernels the edit touches, [touched, below): below them, those it moved; above, those
    # it left in place (as _after_edit tells them apart).
    touched = _first_index(0, count, lambda index: runs.end_byte(index) >= edit.start)
    below = max(
        _first_index(touched, count, lambda index: runs.start_byte(index) > edit.old_end),
        _first_index(touched, count, lambda index: runs.start_line(index) > edit.old_end_line),
    )
    placed = _Placed(runs, touched, below, edit.new_end - edit.old_end)
    dirty = [(edit.start, edit.new_end), *earlier.changed]
    for index in range(touched, below):
        end = runs.end_byte(index) + placed.delta
        dirty.append((min(runs.start_byte(index), edit.start), max(end, edit.new_end)))
    reread = placed.with_errors()
    dirty += [placed.span(index) for index in reread]
    pending = list(dirty)
    while pending:  # a kernel read anew widens what is read anew, until nothing more is
        low, high = pending.pop()
        for index in placed.overlapping(low, high):
            if index not in reread:
                reread.add(index)
                pending.append(placed.span(index))
                dirty.append(placed.span(index))
    fresh = _definitions(root, data, _tokens_within(root, data, "__global__", dirty))
    if earlier.inert and (fresh or reread):
        raise StaleTree("kernels to read anew")
    fresh.sort(key=attrgetter("start_byte"))
    # A kept kernel where one was read anew (found just past a changed range) is that one.
    reread |= {index for kernel in fresh if (index := placed.starting_at(kernel.start_byte)) is not None}
    return placed.runs(reread, fresh, edit.lines_by)


class _Placed:
    """The earlier kernels an edit did not touch, at their places in the new text: those above the edit
    (indices before `touched`) where they were, those below (from `below` on) moved by `delta` bytes."""

    def __init__(self, runs: KernelRuns, touched: int, below: int, delta: int) -> None:
        self.kernels, self.touched, self.below, self.delta = runs, touched, below, delta
        self._indices = (range(0, touched), range(below, len(runs)))

    def start(self, index: int) -> int:
        return self.kernels.start_byte(index) + (self.delta if index >= self.below else 0)

    def end(self, index: int) -> int:
        return self.kernels.end_byte(index) + (self.delta if index >= self.below else 0)

    def span(self, index: int) -> tuple[int, int]:
        return self.start(index), self.end(index)

    def _starts_from(self, byte: int, index: int) -> bool:
        return self.start(index) >= byte

    def with_errors(self) -> set[int]:
        """The kept kernels with syntax errors (always read anew: tree-sitter's recovery depends on what
        surrounds them)."""
        found = set()
        for number, run in enumerate(self.kernels.runs):
            first = self.kernels.first_of(number)
            errors = run.block.errors
            for at in errors[bisect.bisect_left(errors, run.lo) : bisect.bisect_left(errors, run.hi)]:
                index = first + at - run.lo
                if index < self.touched or index >= self.below:
                    found.add(index)
        return found

    def overlapping(self, low: int, high: int) -> Iterator[int]:
        """The kept kernels that overlap [low, high] (ends included), ascending."""
        for indices in self._indices:
            first = _first_index(indices.start, indices.stop, lambda index: self.end(index) >= low)
            yield from range(first, _first_index(first, indices.stop, lambda index: self.start(index) > high))

    def starting_at(self, start: int) -> int | None:
        """The kept kernel that starts at the byte, if one does."""
        for indices in self._indices:
            at = _first_index(indices.start, indices.stop, lambda index: self.start(index) >= start)
            if at < indices.stop and self.start(at) == start:
                return at
        return None

    def runs(self, dropped: set[int], fresh: list[Kernel], lines_by: int) -> KernelRuns:
        """The kept kernels but `dropped`, as runs (moved where below the edit), with the `fresh` ones (in
        source order) between them: a fresh kernel goes before the kept ones that start after it."""
        pieces: list[KernelRun] = []
        group: list[Kernel] = []  # fresh kernels waiting for the next kept one
        taken = 0
        for run, first, start, stop in self._stretches(dropped):
            while start < stop:
                if taken < len(fresh) and fresh[taken].start_byte <= self.start(start):
                    group.append(fresh[taken])
                    taken += 1
                    continue
                if group:
                    pieces.append(KernelRun(KernelBlock(group), 0, len(group)))
                    group = []
                split = stop
                if taken < len(fresh):
                    split = _first_index(start, stop, partial(self._starts_from, fresh[taken].start_byte))
                moved = start >= self.below
                by = (self.delta, lines_by) if moved else (0, 0)
                pieces.append(run.moved(*by, run.lo + start - first, run.lo + split - first))
                start = split
        group += fresh[taken:]
        if group:
            pieces.append(KernelRun(KernelBlock(group), 0, len(group)))
        return KernelRuns(pieces)

    def _stretches(self, dropped: set[int]) -> Iterator[tuple[KernelRun, int, int, int]]:
        """(run, index of its first kernel, start, stop): the kept kernels start to stop (indices of the
        earlier kernels), in order, each stretch within one run and on one side of the edit."""
        kept = self.kernels
        cuts = sorted(dropped)
        for indices in self._indices:
            for number, run in enumerate(kept.runs):
                first = kept.first_of(number)
                lo, hi = max(indices.start, first), min(indices.stop, first + run.hi - run.lo)
                if lo >= hi:
                    continue
                inside = cuts[bisect.bisect_left(cuts, lo) : bisect.bisect_left(cuts, hi)]
                for start, stop in _between(lo, hi, inside):
                    if start < stop:
                        yield run, first, start, stop


def _between(lo: int, hi: int, cuts: list[int]) -> Iterator[tuple[int, int]]:
    """The stretches of [lo, hi) between the indices `cuts` (ascending, each left out)."""
    start = lo
    for cut in cuts:
        yield start, cut
        start = cut + 1
    yield start, hi


def _tokens_within(root: Node, data: bytes, token: str, ranges: Sequence[tuple[int, int]]) -> Iterator[Node]:
    """`_tokens`, only those that overlap the byte ranges."""
    needle, seen = token.encode(), set()
    for low, high in sorted(ranges):
        offset = data.find(needle, max(0, low - len(needle)), high + len(needle))
        while offset != -1:
            if offset not in seen:
                seen.add(offset)
                node = root.descendant_for_byte_range(offset, offset + len(needle))
                if node is not None and node.type == token and not node.is_named:
                    yield node
            offset = data.find(needle, offset + len(needle), high + len(needle))


# Kernels read before, by their text and context: the language server reads the whole file on every edit,
# and an unchanged kernel that only moved is the same Kernel with its positions shifted (reading 275
# kernels took 12 ms of a 5,000-line file's analysis). Kernels with syntax errors are always read anew:
# tree-sitter's recovery depends on what surrounds them.
_KNOWN: BoundedMemo[tuple[bytes, int, tuple[str, ...], bool], Kernel] = BoundedMemo()


def _known_kernel(definition: Node, data: bytes, lineage: Sequence[Node]) -> Kernel:
    """`lineage`: the nodes from the root down to the definition's parent (`ancestors`)."""
    outer = _outermost(definition)
    if outer.has_error:
        return _kernel(definition, data, lineage)
    # Everything _kernel reads: the definition's own bytes, its first column, and two facts from its
    # ancestors (the namespaces around it, an enclosing extern "C" block).
    key = (
        data[outer.start_byte : outer.end_byte],
        outer.start_point.column,
        tuple(_enclosing_namespaces(lineage, data)),
        _is_extern_c(lineage, data),
    )
    known = _KNOWN.get_or_make(key, lambda: _kernel(definition, data, lineage))
    read = known.read.span
    moved_by = (outer.start_byte - read.start_byte, outer.start_point.row - read.start_line)
    if moved_by == (0, 0):
        return known
    # Built directly: dataclasses.replace is generic, and this runs for every kernel below an edit.
    return _moved(known, *moved_by)


def _kernel(definition: Node, data: bytes, lineage: Sequence[Node]) -> Kernel:
    outer = _outermost(definition)
    declarator = _function_declarator(definition)
    name_node, template_arguments, scope = _declared_name(declarator, data)
    last = _last_intact_node(definition)
    body = definition.child_by_field_name("body")
    return Kernel(
        name=_text(name_node, data) if name_node else "",
        template_parameters=_template_parameters(definition, data),
        extern_c=_is_extern_c(lineage, data),
        launch_bounds=_launch_bounds(definition, data),
        has_errors=outer.has_error,
        read=KernelPositions(
            span=_span(outer, last),
            body_span=_span(body, last) if body else _empty_span_after(last),
            name_span=node_span(name_node) if name_node else _empty_span_after(definition),
            parameters=_parameters(declarator, data),
        ),
        template_arguments=template_arguments,
        namespace="::".join([*_enclosing_namespaces(lineage, data), *scope]),
    )


def _outermost(definition: Node) -> Node:
    """The node that starts the definition as the user wrote it: `template <...>` above it, and
    `extern "C"` when it qualifies this definition alone (not a whole `extern "C" { ... }` block)."""
    node = definition
    while (parent := node.parent) is not None:
        if parent.type == "template_declaration" or (
            parent.type == "linkage_specification" and parent.child_by_field_name("body") == node
        ):
            node = parent
        else:
            break
    return node


# Where tree-sitter's error recovery can leave a following definition inside a broken kernel's body.
_DEFINITION_TYPES = frozenset({"function_definition", "template_declaration", "linkage_specification"})


def _last_intact_node(definition: Node) -> Node:
    """The definition's last node, cut before any definition that error recovery nested in its body.

    With a missing `}`, tree-sitter keeps parsing the next kernels *inside* the broken one. Those are
    reported on their own; the broken kernel's range stops before them so the two never overlap and a
    rewrite of the broken kernel cannot delete its neighbours."""
    body = definition.child_by_field_name("body")
    if body is None or not definition.has_error:
        return definition
    previous: Node = body.children[0] if body.children else body
    for child in body.children:
        if child.type in _DEFINITION_TYPES:
            return previous
        previous = child
    return definition


def _empty_span_after(node: Node) -> Span:
    return _points_span(node.end_byte, node.end_point, node.end_byte, node.end_point)


def _function_declarator(definition: Node) -> Node | None:
    """The `name(params)` part; `declarator` fields nest (e.g. through a pointer for `T* f()`)."""
    node = definition.child_by_field_name("declarator")
    while node is not None and node.type != "function_declarator":
        node = node.child_by_field_name("declarator")
    return node


def _declared_name(declarator: Node | None, data: bytes) -> tuple[Node | None, str | None, list[str]]:
    """The name identifier, the explicit specialisation's template arguments, and any `ns::` scopes."""
    node = declarator.child_by_field_name("declarator") if declarator else None
    scope: list[str] = []
    while node is not None and node.type == "qualified_identifier":
        scope_node = node.child_by_field_name("scope")
        # `__global__ void LAUNCH_BOUNDS k()` (a macro) recovers as `LAUNCH_BOUNDS::k` with a missing `::`.
        if scope_node is not None and not node.has_error:
            scope.append(_text(scope_node, data))
        node = node.child_by_field_name("name")
    if node is not None and node.type == "template_function":
        arguments = _inner_text(node.child_by_field_name("arguments"), data)
        return node.child_by_field_name("name"), arguments, scope
    return node, None, scope


def _enclosing_namespaces(lineage: Sequence[Node], data: bytes) -> list[str]:
    """The names of the namespaces around a definition, outermost first (`lineage`: its ancestors)."""
    return [
        _text(name, data)
        for node in lineage
        if node.type == "namespace_definition" and (name := node.child_by_field_name("name")) is not None
    ]


def _is_extern_c(lineage: Sequence[Node], data: bytes) -> bool:
    """Whether the innermost linkage specification around a definition is `extern "C"`."""
    node = next((n for n in reversed(lineage) if n.type == "linkage_specification"), None)
    value = node.child_by_field_name("value") if node is not None else None
    return value is not None and _inner_text(value, data) == "C"


def _launch_bounds(definition: Node, data: bytes) -> str | None:
    bounds = next((child for child in definition.children if child.type == "launch_bounds"), None)
    if bounds is None:
        return None
    # Children: `__launch_bounds__` `(` arguments... `)`; the text between the parentheses, as written.
    opening = next((child for child in bounds.children if child.type == "("), None)
    closing = bounds.children[-1]
    if opening is None or closing.type != ")":
        return None
    return data[opening.end_byte : closing.start_byte].decode("utf-8", errors="replace").strip()


# -- parameters ----------------------------------------------------------------------------------------

_PARAMETER_TYPES = frozenset(
    {"parameter_declaration", "optional_parameter_declaration", "variadic_parameter_declaration"}
)
_POINTER_DECLARATORS = frozenset({"pointer_declarator", "abstract_pointer_declarator"})
_ARRAY_DECLARATORS = frozenset({"array_declarator", "abstract_array_declarator"})
_NAME_TYPES = frozenset({"identifier", "field_identifier"})
_RESTRICT_WORDS = frozenset({"__restrict__", "__restrict", "restrict"})


def _parameters(declarator: Node | None, data: bytes) -> tuple[Parameter, ...]:
    parameter_list = declarator.child_by_field_name("parameters") if declarator else None
    if parameter_list is None:
        return ()
    nodes = [child for child in parameter_list.named_children if child.type in _PARAMETER_TYPES]
    # `k(void)` declares no parameters.
    if len(nodes) == 1 and nodes[0].child_by_field_name("declarator") is None:
        type_node = nodes[0].child_by_field_name("type")
        if type_node is not None and _text(type_node, data) == "void":
            return ()
    return tuple(_parameter(node, data) for node in nodes)


def _parameter(node: Node, data: bytes) -> Parameter:
    type_node = node.child_by_field_name("type")
    name_node, depth, restrict = _walk_declarator(node.child_by_field_name("declarator"), data)
    # A `const` directly in the declaration qualifies the base type, i.e. the pointee for pointers
    # (`const float* x`, `float const* x`); `float* const x` keeps its const inside the declarator.
    is_const = any(
        child.type == "type_qualifier" and _text(child, data) == "const" for child in node.children
    )
    accessor = _accessor(type_node, data) if depth == 0 else None
    return Parameter(
        name=_text(name_node, data) if name_node else "",
        type=accessor[1] if accessor else _text(type_node, data) if type_node else "",
        is_pointer=depth > 0,
        is_const=is_const,
        is_restrict=restrict,
        text=_text(node, data),
        span=node_span(node),
        pointer_depth=depth,
        accessor=accessor[0] if accessor else None,
    )


# torch's packed accessors, with the width of their index type (None: the template's fourth argument).
_ACCESSOR_TEMPLATES = {
    "PackedTensorAccessor32": 32,
    "PackedTensorAccessor64": 64,
    "PackedTensorAccessor": 64,  # deprecated spelling, int64_t indices by default
    "GenericPackedTensorAccessor": None,
}
_INDEX_BITS = {"int32_t": 32, "int": 32, "int64_t": 64, "long": 64, "long long": 64}


def _accessor(type_node: Node | None, data: bytes) -> tuple[Accessor, str] | None:
    """(accessor, element type) for `[torch::|at::]PackedTensorAccessor32<T, N, Traits>` and its kin; None
    for any other type, or a rank that is not a number (a template parameter)."""
    while type_node is not None and type_node.type == "qualified_identifier":
        type_node = type_node.child_by_field_name("name")
    if type_node is None or type_node.type != "template_type":
        return None
    template = _text(type_node.child_by_field_name("name"), data)
    arguments = type_node.child_by_field_name("arguments")
    if template not in _ACCESSOR_TEMPLATES or arguments is None:
        return None
    values = [_text(child, data) for child in arguments.named_children if child.type != "comment"]
    if len(values) < 2 or not values[1].isdigit() or int(values[1]) < 1:
        return None
    bits = _ACCESSOR_TEMPLATES[template]
    if len(values) >= 4:  # GenericPackedTensorAccessor<T, N, Traits, index_t>, or the old default overridden
        bits = _INDEX_BITS.get(" ".join(values[3].split()))
    if bits is None:
        return None
    return Accessor(rank=int(values[1]), index_bits=bits, template=template), values[0]


def _walk_declarator(declarator: Node | None, data: bytes) -> tuple[Node | None, int, bool]:
    """Follow a parameter's declarator inwards to its name: (name node, pointer depth, restrict)."""
    depth, restrict = 0, False
    node = declarator
    while node is not None:
        if node.type in _NAME_TYPES:
            return node, depth, restrict
        if node.type in _POINTER_DECLARATORS:
            depth += 1
            restrict = restrict or _has_restrict(node, data)
        elif node.type in _ARRAY_DECLARATORS:
            depth += 1
        node = node.child_by_field_name("declarator") or _inner_declarator(node)
    return None, depth, restrict


def _inner_declarator(node: Node) -> Node | None:
    """Reference, parenthesised and variadic declarators hold their inner declarator without a field."""
    return next(
        (
            child
            for child in node.named_children
            if child.type in _NAME_TYPES or child.type.endswith("declarator")
        ),
        None,
    )


def _has_restrict(pointer: Node, data: bytes) -> bool:
    for child in pointer.children:
        # `__restrict__` parses as a type_qualifier; MSVC-style `__restrict` as an ms_pointer_modifier.
        if child.type == "type_qualifier" and _text(child, data) in _RESTRICT_WORDS:
            return True
        if child.type == "ms_pointer_modifier" and any(
            grandchild.type == "ms_restrict_modifier" for grandchild in child.children
        ):
            return True
    return False


# -- template parameters -------------------------------------------------------------------------------

_TYPE_TEMPLATE_PARAMETERS = frozenset(
    {
        "type_parameter_declaration",
        "optional_type_parameter_declaration",
        "variadic_type_parameter_declaration",
        "template_template_parameter_declaration",
    }
)


def _template_parameters(definition: Node, data: bytes) -> tuple[TemplateParameter, ...]:
    template = definition.parent
    if template is None or template.type != "template_declaration":
        return ()
    parameter_list = template.child_by_field_name("parameters")
    if parameter_list is None:
        return ()
    return tuple(
        _template_parameter(node, data)
        for node in parameter_list.named_children
        if node.type in _TYPE_TEMPLATE_PARAMETERS or node.type in _PARAMETER_TYPES
    )


def _template_parameter(node: Node, data: bytes) -> TemplateParameter:
    default = node.child_by_field_name("default_type") or node.child_by_field_name("default_value")
    return TemplateParameter(
        name=_template_parameter_name(node, data),
        kind="type" if node.type in _TYPE_TEMPLATE_PARAMETERS else "value",
        text=_text(node, data),
        default=_text(default, data) if default else None,
    )


def _template_parameter_name(node: Node, data: bytes) -> str:
    if node.type in _PARAMETER_TYPES:
        name_node, _, _ = _walk_declarator(node.child_by_field_name("declarator"), data)
        return _text(name_node, data) if name_node else ""
    while node.type == "template_template_parameter_declaration":  # nested as deep as written
        # `template <typename> class W`: the name sits in the trailing `class W`.
        inner = next((c for c in reversed(node.named_children) if c.type in _TYPE_TEMPLATE_PARAMETERS), None)
        if inner is None:
            return ""
        node = inner
    name_node = node.child_by_field_name("name") or next(
        (child for child in node.named_children if child.type == "type_identifier"), None
    )
    return _text(name_node, data) if name_node else ""


# -- launch sites --------------------------------------------------------------------------------------


def find_launch_sites(source: str, tree: Tree | None = None) -> list[LaunchSite]:
    """Every `kernel<<<config>>>(arguments)` call, in source order."""
    data = source.encode("utf-8")
    if b"<<<" not in data:
        return []  # most kernel files launch nothing: no parse (rewrites ask once per candidate)
    root = (tree or parse_cuda(data)).root_node
    return [
        _launch_site(call, data)
        for token in _tokens(root, data, "<<<")
        if (call := _launch_call(token)) is not None
    ]


def launch_calls(root: Node, data: bytes) -> Iterator[tuple[str, Node]]:
    """(the launched kernel's name without namespace or template arguments, its call_expression) for every
    `<<<...>>>` launch: what find_launch_sites reads, without building its spans and texts."""
    if b"<<<" not in data:
        return
    for token in _tokens(root, data, "<<<"):
        call = _launch_call(token)
        function = call.child_by_field_name("function") if call is not None else None
        if call is not None and function is not None:
            yield _called_kernel(function, data)[0].split("::")[-1], call


def _launch_call(opening: Node) -> Node | None:
    """The call_expression a `<<<` token opens the configuration of, if it does."""
    config = opening.parent
    if config is None or config.type != "kernel_call_syntax":
        return None
    call = config.parent
    return call if call is not None and call.type == "call_expression" else None


def _launch_site(call: Node, data: bytes) -> LaunchSite:
    function = call.child_by_field_name("function")
    config = next(child for child in call.children if child.type == "kernel_call_syntax")
    arguments = call.child_by_field_name("arguments")
    kernel, template_arguments = _called_kernel(function, data) if function else ("", None)
    return LaunchSite(
        kernel=kernel,
        template_arguments=template_arguments,
        config=_expressions(config, data),
        arguments=_expressions(arguments, data) if arguments else (),
        span=node_span(call),
        config_span=_between_delimiters(config),
    )


def _called_kernel(function: Node, data: bytes) -> tuple[str, str | None]:
    """`ops::k<float, 256>` -> ("ops::k", "float, 256"): the template arguments sit in the innermost
    template_function, which may be the `name` of a qualified identifier."""
    node: Node | None = function
    while node is not None and node.type == "qualified_identifier":
        node = node.child_by_field_name("name")
    arguments = node.child_by_field_name("arguments") if node and node.type == "template_function" else None
    if arguments is None:
        return _text(function, data), None
    name = data[function.start_byte : arguments.start_byte].decode("utf-8").strip()
    return name, _inner_text(arguments, data)


def _expressions(delimited: Node, data: bytes) -> tuple[str, ...]:
    """The comma-separated expressions of `<<<...>>>` or `(...)`, as written; comments dropped."""
    return tuple(_text(child, data) for child in delimited.named_children if child.type != "comment")


def _between_delimiters(delimited: Node) -> Span:
    """The span between a node's first and last tokens (`<<<` and `>>>`). If error recovery lost the
    closing token, the span runs to the node's end."""
    opening, closing = delimited.children[0], delimited.children[-1]
    if closing == opening or closing.is_named or closing.is_missing:
        return _points_span(opening.end_byte, opening.end_point, delimited.end_byte, delimited.end_point)
    return _gap_span(opening, closing)


# -- text ----------------------------------------------------------------------------------------------


def _text(node: Node, data: bytes) -> str:
    return data[node.start_byte : node.end_byte].decode("utf-8", errors="replace")


def _inner_text(delimited: Node | None, data: bytes) -> str | None:
    """The text between a node's first and last child tokens: `"C"` -> `C`, `(256, 2)` -> `256, 2`."""
    if delimited is None or delimited.child_count < 2:
        return None
    opening, closing = delimited.children[0], delimited.children[-1]
    return data[opening.end_byte : closing.start_byte].decode("utf-8", errors="replace").strip()


def kernel_body(kernel: Kernel, tree: Tree) -> Node | None:
    """The kernel's `{ ... }` in `tree`."""
    node = tree.root_node.descendant_for_byte_range(kernel.body_span.start_byte, kernel.body_span.end_byte)
    while node is not None and node.type != "compound_statement":
        node = node.parent
    return node
