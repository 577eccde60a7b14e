"""A 2-D kernel reading a window of an input around each thread's (row, col) -> the block's window staged
in shared memory once, the reads served from there.

Driven by the analysis: a thread per (row, col) (col along x, row along y) whose reads of an input are
all at `x[(row + dr) * W + (col + dc)]`, dr and dc made of counted loops' variables and numbers (a box
blur's `for (blurRow = -R; ...)`, a convolution with a mask in constant memory, `start_r + i`) or of
numbers alone (a 5- or 9-point stencil written out): neighbouring threads read overlapping windows,
and each element is loaded from global memory by up to (2R+1)^2 threads. Here the block first loads
its rows [row0 + min dr, row0 + BY - 1 + max dr] x its columns likewise into a shared tile (elements
outside the array are not loaded), then runs the user's statements as written, each read of the input
taken from the tile. The reads' own guards (`if (curRow > -1 && curRow < h ...)`) stay, so a read
the original would not make is not made.

Offered where the input is a 2-D array in the spec ([H, W], W the read's row stride), the window spans
at most 33 rows and columns beyond the block, and the block is written as constants in the indices of
the tile (the launch's block is the rewrite's own).
"""

from __future__ import annotations

import re
from dataclasses import dataclass

from cuda_agent.agent.analysis import KernelFacts, analysed
from cuda_agent.agent.analysis.facts import Access, Loop
from cuda_agent.agent.analysis.forms import Form
from cuda_agent.agent.candidates import Candidate
from cuda_agent.agent.proposers.rewrites._bounds import NotInSizes, in_kernel_terms
from cuda_agent.agent.proposers.tree import (
    SHARED_LIMIT,
    KernelTree,
    build_candidate,
    element_type,
    local_names,
)
from cuda_agent.agent.spec import LaunchSpec
from cuda_agent.agent.targets import KernelTarget
from tree_sitter import Node

PROPOSER = "rewrite:window-tile"
BLOCKS = ((32, 8), (16, 16))
MAX_HALO = 33  # rows (columns) of the window beyond the block's own
_ROW = Form.atom("blockDim.y") * Form.atom("blockIdx.y") + Form.atom("threadIdx.y")
_COL = Form.atom("blockDim.x") * Form.atom("blockIdx.x") + Form.atom("threadIdx.x")


class _Unsupported(Exception):
    pass


@dataclass(frozen=True)
class _Window:
    """One input's reads: the array, its row stride and rows (kernel terms), each read's (dr, dc) as forms of
    loop variables and numbers, and the window's extent around the block."""

    array: str
    element: str
    element_bytes: int
    stride: str
    rows: str  # the bound an element {r}, {c} must keep besides 0 <= c < stride
    reads: tuple[tuple[Node, Form, Form], ...]
    top: int  # min dr
    bottom: int  # max dr
    left: int
    right: int


def propose(target: KernelTarget) -> list[Candidate]:
    found = analysed(target)
    spec = target.spec
    if found is None or spec is None or len(spec.launch.block) < 2 or spec.launch.block[2:] not in ((), (1,)):
        return []
    tree, facts = found
    try:
        windows = _windows(tree, facts)
    except _Unsupported:
        return []
    candidates = []
    for block in BLOCKS:
        tiles = sum(
            (block[1] + w.bottom - w.top) * (block[0] + w.right - w.left) * w.element_bytes for w in windows
        )
        if tiles > SHARED_LIMIT:
            continue
        grid = tuple(_grid(spec.launch.grid[a], spec.launch.block[a], block[a], "xy"[a]) for a in (0, 1))
        names = ", ".join(w.array for w in windows)
        candidates.append(
            build_candidate(
                tree,
                body=_body(tree, windows, block),
                launch=LaunchSpec(block=block, grid=grid),
                description=f"the window of {names} each block reads staged in shared memory once "
                f"({block[0]}x{block[1]} threads, a {block[1] + windows[0].bottom - windows[0].top}x"
                f"{block[0] + windows[0].right - windows[0].left} tile), the reads served from there",
                proposer=PROPOSER,
            )
        )
    return candidates


def _grid(written: str, was: int, now: int, axis: str) -> str:
    """The grid along one axis for blocks `now` wide, from the spec's for blocks `was` wide: the same
    threads, rounded up (`ceil_div(w, 16)` becomes `ceil_div(w, 32)`)."""
    covering = re.fullmatch(
        rf"\s*(?:ceil_div|cdiv)\((?P<count>.+),\s*(?:block\.{axis}|{was})\s*\)\s*", written
    )
    if covering:
        return f"ceil_div({covering['count'].strip()}, {now})"
    return f"ceil_div(({written}) * {was}, {now})"


def _windows(tree: KernelTree, facts: KernelFacts) -> list[_Window]:
    if facts.uses_shared or facts.barriers or facts.atomics or facts.thread_uses or facts.unmodelled:
        raise _Unsupported("shared memory, barriers, atomics, builtins or untracked loads in the body")
    mapped = {i.axis: i for i in facts.indices if i.direct}
    if set(mapped) - {None} != {"x", "y"}:
        raise _Unsupported("not a thread per (row, col)")
    written = {a.array for a in facts.accesses if a.write}
    # each counted loop variable's range of values; one two loops count differently has none
    ranges: dict[str, tuple[int, int] | None] = {}
    for loop in facts.loops:
        counted = _range(loop)
        ranges[loop.variable] = counted if ranges.get(loop.variable, counted) == counted else None
    by_array: dict[str, list[Access]] = {}
    for access in facts.accesses:
        if not access.write and access.array not in written:
            by_array.setdefault(access.array, []).append(access)
    windows = []
    for array, reads in by_array.items():
        window = _window(tree, array, reads, ranges)
        if window is not None:
            windows.append(window)
    if not windows:
        raise _Unsupported("no input read as a window around the thread")
    return windows


def _window(
    tree: KernelTree, array: str, reads: list[Access], ranges: dict[str, tuple[int, int] | None]
) -> _Window | None:
    """The input's window, where every read of it is `(row + dr) * W + col + dc` and it spans more than
    the thread's own element; None otherwise (the input is left as it is)."""
    stride = reads[0].offset.coefficient("threadIdx.y")
    if stride is None or len(stride.terms) != 1 or stride.is_constant():
        return None
    ((factors, scale),) = stride.terms.items()
    if scale != 1 or len(factors) != 1:
        return None
    width = factors[0]
    places, spans = [], []
    for read in reads:
        row_part = read.offset.coefficient(width)  # the offset is row_part * W + col_part
        if row_part is None:
            return None
        dr, dc = row_part - _ROW, read.offset.without(width) - _COL
        row_span, col_span = _span(dr, ranges), _span(dc, ranges)
        if row_span is None or col_span is None:
            return None
        places.append((read.node, dr, dc))
        spans.append((row_span, col_span))
    top, bottom = min(s[0][0] for s in spans), max(s[0][1] for s in spans)
    left, right = min(s[1][0] for s in spans), max(s[1][1] for s in spans)
    if (top, bottom, left, right) == (0, 0, 0, 0) or bottom - top > MAX_HALO or right - left > MAX_HALO:
        return None
    element = element_type(tree.parameter(array))
    rows = _rows(tree, array, width)
    if element is None or rows is None or reads[0].element_bytes is None:
        return None
    return _Window(
        array, element, reads[0].element_bytes, width, rows, tuple(places), top, bottom, left, right
    )


def _range(loop: Loop) -> tuple[int, int] | None:
    start, bound, step = loop.start.value(), loop.bound.value(), loop.step.value()
    if start is None or bound is None or step is None or step < 1 or bound <= start:
        return None
    return start, start + (bound - 1 - start) // step * step


def _span(form: Form, ranges: dict[str, tuple[int, int] | None]) -> tuple[int, int] | None:
    """The least and the greatest value of a sum of numbers and counted loops' variables; None where the
    form is anything else."""
    low = high = 0
    for monomial, c in form.terms.items():
        if not monomial:
            low, high = low + c, high + c
            continue
        counted = ranges.get(monomial[0]) if len(monomial) == 1 else None
        if counted is None:
            return None
        first, last = counted
        low, high = low + min(c * first, c * last), high + max(c * first, c * last)
    return low, high


def _rows(tree: KernelTree, array: str, width: str) -> str | None:
    """The bound an element (`{r}`, `{c}`) of the array must keep, in the kernel's terms: its rows where
    the spec gives it a 2-D shape whose width is the read's row stride, its length where a flat one."""
    spec = tree.target.spec
    argument = spec.argument(array) if spec is not None else None
    if argument is None or len(argument.shape) not in (1, 2):
        return None
    try:
        sides = [in_kernel_terms(tree, str(side)) for side in argument.shape]
    except NotInSizes:
        return None
    if len(sides) == 1:
        return f"{{r}} * {width} + {{c}} < {sides[0]}"
    return f"{{r}} < {sides[0]}" if sides[1].strip("()") == width else None


def _body(tree: KernelTree, windows: list[_Window], block: tuple[int, int]) -> str:
    bx, by = block
    n = local_names(tree, "row0", "col0", "e", "r", "c", *(f"{w.array}_tile" for w in windows))
    row0, col0, e, r, c = n["row0"], n["col0"], n["e"], n["r"], n["c"]
    staged, replaced = [], {}
    for w in windows:
        tile, rows, cols = n[f"{w.array}_tile"], by + w.bottom - w.top, bx + w.right - w.left
        staged.append(f"""\
    __shared__ {w.element} {tile}[{rows}][{cols}];
    for (int {e} = threadIdx.y * {bx} + threadIdx.x; {e} < {rows * cols}; {e} += {bx * by}) {{
        const int {r} = {row0} + ({w.top}) + {e} / {cols}, {c} = {col0} + ({w.left}) + {e} % {cols};
        if ({r} >= 0 && {c} >= 0 && {c} < {w.stride} && {w.rows.format(r=r, c=c)})
            {tile}[{e} / {cols}][{e} % {cols}] = {w.array}[{r} * {w.stride} + {c}];
    }}""")
        for node, dr, dc in w.reads:
            row = _plus("threadIdx.y", dr - Form.constant(w.top))
            col = _plus("threadIdx.x", dc - Form.constant(w.left))
            replaced[node.start_byte] = f"{tile}[{row}][{col}]"
    user = tree.substituted(
        tree.body, lambda node: replaced.get(node.start_byte) if node.type == "subscript_expression" else None
    )
    inner = user.strip()[1:-1].rstrip()  # the user's statements, inside their braces
    return f"""{{
    // The window of the input each block of {bx}x{by} threads reads, loaded once into shared memory
    // (neighbouring threads' windows overlap), then the kernel's own statements reading it from there.
    const int {row0} = blockIdx.y * {by}, {col0} = blockIdx.x * {bx};
{chr(10).join(staged)}
    __syncthreads();
{inner}
}}"""


def _plus(base: str, offset: Form) -> str:
    written = offset.text()
    if written == "0":
        return base
    return f"{base} - {written[1:].strip()}" if written.startswith("-") else f"{base} + {written}"
