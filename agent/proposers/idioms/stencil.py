"""A 1-D convolution or a 2-D 5/9-point stencil read straight from global memory -> shared-memory tiles
with halos. The 1-D path is in conv1d.py; the read analysis both share in _reads.py.

2-D, recognised: a 2-D kernel (`col` from x, `row` from y, bounds-checked `row < rows && col < cols`)
reading one input `u` only at `u[(row + dr) * cols + col + dc]` with |dr|, |dc| <= 1, each read off the
centre under guards that keep it inside the grid (`row > 0 ? u[(row - 1) * cols + col] : 0.0f`). The
block loads its (blockDim.y + 2) x (blockDim.x + 2) window (elements outside the grid are not loaded,
and the guards never read them) and the reads become tile reads; the rest is kept verbatim.
"""

from __future__ import annotations

from dataclasses import dataclass

from cuda_agent.agent.candidates import Candidate
from cuda_agent.agent.parsing import linear_form
from cuda_agent.agent.proposers.idioms._reads import (
    ELEMENT_BYTES,
    INDEX_TYPES,
    has_barriers_or_shared,
    occurrences,
    path_conditions,
    read_only_input,
    written_names,
)
from cuda_agent.agent.proposers.idioms.conv1d import PROPOSER, conv1d_candidates, conv1d_window
from cuda_agent.agent.proposers.tree import (
    Edit,
    KernelTree,
    apply_to_body,
    build_candidate,
    fits_shared_memory,
    guarded_region,
    index_variables,
    line_indent,
    local_names,
    operands,
    single_declaration,
    size_expression,
    statements,
    strip_parens,
    subscript_parts,
    untemplated_kernel_tree,
)
from cuda_agent.agent.spec import LaunchSpec
from cuda_agent.agent.targets import KernelTarget
from tree_sitter import Node

BLOCK_2D = (32, 8)


def propose(target: KernelTarget) -> list[Candidate]:
    tree = untemplated_kernel_tree(target)
    if tree is None or target.spec is None or has_barriers_or_shared(tree):
        return []
    if len(target.spec.launch.block) == 1:
        window = conv1d_window(tree)
        return conv1d_candidates(tree, window) if window is not None else []
    grid = _grid_stencil(tree)
    return _stencil2d_candidate(tree, grid) if grid is not None else []


# -- 2-D: a point stencil on a grid ---------------------------------------------------------------------


@dataclass(frozen=True)
class _Grid:
    source: str
    element: str
    row: str
    col: str
    rows: str
    cols: str
    reads: list[tuple[Node, int, int]]  # u[...] and its offset (dr, dc)
    guard: Node


def _grid_stencil(tree: KernelTree) -> _Grid | None:
    indices = index_variables(tree.body)
    guarded = guarded_region(tree)
    if guarded is None or len(indices) != 2 or any(s.type != "declaration" for s in guarded.prefix):
        return None
    axes = {axis: name for name, (axis, _) in indices.items()}
    col, row = axes.get("x"), axes.get("y")
    if col is None or row is None or set(guarded.bounds) != {row, col}:
        return None
    for _, declaration in indices.values():
        declared = single_declaration(declaration, tree)
        if declared is None or declared[0] not in INDEX_TYPES:
            return None
    rows, cols = guarded.bounds[row], guarded.bounds[col]
    if {row, col, rows, cols} & written_names(tree) or not (rows.isidentifier() and cols.isidentifier()):
        return None
    guard = statements(tree.body)[len(guarded.prefix)]
    found = []
    for parameter in tree.target.kernel.parameters:
        reads = _grid_reads(tree, parameter.name, row, col, cols)
        if reads is not None and any((dr, dc) != (0, 0) for _, dr, dc in reads):
            found.append((parameter.name, reads))
    if len(found) != 1:
        return None
    ((source, reads),) = found
    element = read_only_input(tree, source)
    if element is None or not _shape_is_grid(tree, source, rows, cols):
        return None
    for read, dr, dc in reads:
        if read.start_byte < guard.start_byte:  # before the bounds check: it would run before the loader
            return None
        try:
            facts = _facts(tree, path_conditions(read, tree.body))
        except ValueError:
            return None
        if not all(_implied(facts, need) for need in _needs(row, col, rows, cols, dr, dc)):
            return None
    return _Grid(source, element, row, col, rows, cols, reads, guard)


def _grid_reads(
    tree: KernelTree, name: str, row: str, col: str, cols: str
) -> list[tuple[Node, int, int]] | None:
    """Every use of `name` as `name[(row + dr) * cols + col + dc]`, |dr|, |dc| <= 1; None otherwise."""
    reads = []
    for occurrence in occurrences(tree, name):
        subscript = occurrence.parent
        parts = subscript_parts(subscript) if subscript is not None else None
        form = linear_form(parts[1]) if parts is not None else None
        if subscript is None or parts is None or form is None or parts[0] != name:
            return None
        form = dict(form)
        if form.pop(tuple(sorted((row, cols))), 0) != 1 or form.pop((col,), 0) != 1:
            return None
        dr, dc = form.pop((cols,), 0), form.pop((), 0)
        if form or abs(dr) > 1 or abs(dc) > 1:
            return None
        reads.append((subscript, dr, dc))
    return reads or None


def _shape_is_grid(tree: KernelTree, source: str, rows: str, cols: str) -> bool:
    """The spec's shape of the input is the grid the guard bounds (rows x cols), so every element inside
    the grid may be loaded."""
    spec = tree.target.spec
    argument = spec.argument(source) if spec is not None else None
    r, c = (spec.argument(rows), spec.argument(cols)) if spec is not None else (None, None)
    if argument is None or r is None or c is None or r.value is None or c.value is None:
        return False
    shape = tuple(str(d).replace(" ", "") for d in argument.shape)
    r_text, c_text = str(r.value).replace(" ", ""), str(c.value).replace(" ", "")
    return shape in ((r_text, c_text), (f"{r_text}*{c_text}",))


Fact = dict[tuple[str, ...], int]  # a linear form known to be >= 0


def _facts(tree: KernelTree, path: list[tuple[Node, bool]]) -> list[Fact]:
    """What the conditions on the path say, as linear forms >= 0: `row > 0` -> row - 1 >= 0."""
    facts = []
    for condition, truth in path:
        for part in operands(strip_parens(condition), "&&" if truth else "||"):
            fact = _comparison(tree, strip_parens(part), truth)
            if fact is not None:
                facts.append(fact)
    return facts


def _comparison(tree: KernelTree, node: Node, truth: bool) -> Fact | None:
    op, left, right = (node.child_by_field_name(f) for f in ("operator", "left", "right"))
    if node.type != "binary_expression" or op is None or left is None or right is None:
        return None
    a, b = linear_form(left), linear_form(right)
    if a is None or b is None:
        return None
    kind = op.type if truth else {"<": ">=", "<=": ">", ">": "<=", ">=": "<"}.get(op.type)
    difference = dict(a)  # a - b
    for m, c in b.items():
        difference[m] = difference.get(m, 0) - c
    if kind in (">", ">="):
        form = difference
    elif kind in ("<", "<="):
        form = {m: -c for m, c in difference.items()}
    else:
        return None
    if kind in (">", "<"):
        form[()] = form.get((), 0) - 1
    return {m: c for m, c in form.items() if c != 0}


def _needs(row: str, col: str, rows: str, cols: str, dr: int, dc: int) -> list[Fact]:
    """What must hold for (row + dr, col + dc) to be inside the grid, given 0 <= row < rows (cols alike)."""
    needs = []
    for offset, index, size in ((dr, row, rows), (dc, col, cols)):
        if offset < 0:
            needs.append({(index,): 1, (): -1})  # index - 1 >= 0
        elif offset > 0:
            needs.append({(size,): 1, (index,): -1, (): -2})  # size - index - 2 >= 0
    return needs


def _implied(facts: list[Fact], need: Fact) -> bool:
    """Some fact F >= 0 with need - F a constant >= 0."""
    for fact in facts:
        gap = dict(need)
        for m, c in fact.items():
            gap[m] = gap.get(m, 0) - c
        gap = {m: c for m, c in gap.items() if c != 0}
        if set(gap) <= {()} and gap.get((), 0) >= 0:
            return True
    return False


def _stencil2d_candidate(tree: KernelTree, grid: _Grid) -> list[Candidate]:
    rows, cols = size_expression(tree, grid.rows), size_expression(tree, grid.cols)
    if rows is None or cols is None:
        return []
    launch = LaunchSpec(
        block=BLOCK_2D,
        grid=(f"ceil_div({cols}, block.x)", f"ceil_div({rows}, block.y)"),
        shared_bytes=f"(block.x + 2) * (block.y + 2) * {ELEMENT_BYTES[grid.element]}",
    )
    if not fits_shared_memory(tree.target, launch):
        return []
    points = len({(dr, dc) for _, dr, dc in grid.reads})
    return [
        build_candidate(
            tree,
            body=_stencil2d_body(tree, grid),
            launch=launch,
            description=f"shared-memory tile with a one-element halo for the {points}-point stencil",
            proposer=PROPOSER,
        )
    ]


def _stencil2d_body(tree: KernelTree, g: _Grid) -> str:
    n = local_names(tree, "tile", "pitch", "row0", "col0", "r", "c", "gr", "gc")
    tile, pitch, row0, col0, r, c, row, col = n.values()
    pad = line_indent(tree, g.guard)
    lines = [
        f"// The block's window of {g.source} in shared memory, one element of halo on every side:",
        "// each element is loaded once here instead of once per neighbour. Elements outside the",
        f"// {g.rows} x {g.cols} grid are not loaded; the guards below never read them.",
        f"extern __shared__ {g.element} {tile}[];",
        f"const int {pitch} = blockDim.x + 2;",
        f"const int {row0} = (int)(blockIdx.y * blockDim.y) - 1;  // {g.source}'s row in the tile's row 0",
        f"const int {col0} = (int)(blockIdx.x * blockDim.x) - 1;  // its column in the tile's column 0",
        f"for (int {r} = threadIdx.y; {r} < (int)blockDim.y + 2; {r} += blockDim.y)",
        f"    for (int {c} = threadIdx.x; {c} < {pitch}; {c} += blockDim.x) {{",
        f"        const int {row} = {row0} + {r}, {col} = {col0} + {c};",
        f"        if ({row} >= 0 && {row} < {g.rows} && {col} >= 0 && {col} < {g.cols})",
        f"            {tile}[{r} * {pitch} + {c}] = {g.source}[(size_t){row} * {g.cols} + {col}];",
        "    }",
        "__syncthreads();",
        "",
    ]
    loader = "".join((pad + line if line else "") + "\n" for line in lines) + pad
    edits: list[Edit] = [(g.guard.start_byte, g.guard.start_byte, loader[len(pad) :])]
    for read, dr, dc in g.reads:
        y = "threadIdx.y" if dr == -1 else f"(threadIdx.y + {1 + dr})"
        x = "threadIdx.x" if dc == -1 else f"threadIdx.x + {1 + dc}"
        edits.append((read.start_byte, read.end_byte, f"{tile}[{y} * {pitch} + {x}]"))
    return apply_to_body(tree, edits)
