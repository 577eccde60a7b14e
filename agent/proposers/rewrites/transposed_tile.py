"""A 2-D kernel that reads an array down its columns while it reads and writes others along rows -> that
array staged through a 32 x 32 shared tile, loaded along its rows.

Driven by the analysis' coalescing model: a thread per (row, col), col along x, whose loads and stores
are one element apart between neighbouring threads of a warp, but for one or more loads that are a row
apart along x and one element apart along y (`C[row * n + col] = A[row * n + col] + B[col * n + row]`,
`A + Aᵀ`, a product with a transposed factor). Swapping the axes (swap_axes) would only move the stride
to the other arrays; the transpose idiom covers a kernel that is a transpose and nothing else. Here a
block of 32 x 8 threads owns a 32 x 32 tile of outputs: it first loads the transposed reads' 32 x 32
elements with neighbouring threads on neighbouring addresses (the tile's (row, col) swapped between the
threads), then each thread runs the user's statements for 4 outputs of the tile, reading those elements
from shared memory (one column of padding: the column reads hit 32 banks). The statements are the
user's, the reads replaced; the bounds check keeps its meaning for every output.
"""

from __future__ import annotations

from dataclasses import dataclass

from cuda_agent.agent.analysis import KernelFacts, analysed
from cuda_agent.agent.analysis.facts import Access, ThreadIndex
from cuda_agent.agent.analysis.forms import LANE, Form
from cuda_agent.agent.candidates import Candidate
from cuda_agent.agent.parsing import ancestors
from cuda_agent.agent.proposers.idioms._reads import path_conditions
from cuda_agent.agent.proposers.rewrites._bounds import NotInSizes, bound_terms
from cuda_agent.agent.proposers.tree import (
    KernelTree,
    build_candidate,
    declared_names,
    element_type,
    identifiers,
    local_names,
    statements,
    walk,
)
from cuda_agent.agent.spec import LaunchSpec
from cuda_agent.agent.targets import KernelTarget
from tree_sitter import Node

PROPOSER = "rewrite:transposed-tile"
TILE = 32  # a warp's width: a tile row is one coalesced load
ROWS = 8  # threads along y: each runs TILE / ROWS outputs of the tile
_BUILTINS = ("threadIdx", "blockIdx", "blockDim", "gridDim")


class _Unsupported(Exception):
    pass


@dataclass(frozen=True)
class _Staged:
    """One transposed read: its text (in the kernel's row and col), the nodes that read it, its tile."""

    array: str
    written: str
    nodes: tuple[Node, ...]
    tile: str
    element: str


def propose(target: KernelTarget) -> list[Candidate]:
    found = analysed(target)
    if found is None or target.spec is None:
        return []
    tree, facts = found
    try:
        row, col, staged = _recognise(tree, facts)
        launch = _launch(tree, facts, row, col)
        body = _body(tree, facts, row, col, staged)
    except _Unsupported:
        return []
    names = ", ".join(dict.fromkeys(s.array for s in staged))
    return [
        build_candidate(
            tree,
            body=body,
            launch=launch,
            description=f"{names} read down its columns staged through a {TILE}x{TILE} shared tile loaded "
            "along its rows: every load and store of a warp coalesced",
            proposer=PROPOSER,
        )
    ]


def _recognise(tree: KernelTree, facts: KernelFacts) -> tuple[ThreadIndex, ThreadIndex, list[_Staged]]:
    guard = facts.guard
    spec = tree.target.spec
    assert spec is not None
    if guard is None or guard.others or len(spec.launch.block) < 2 or spec.launch.block[2:] not in ((), (1,)):
        raise _Unsupported("no bounds check of (row, col) alone, or not a 2-D launch")
    if (
        facts.loops
        or facts.uses_shared
        or facts.barriers
        or facts.atomics
        or facts.thread_uses
        or facts.unmodelled
    ):
        raise _Unsupported("loops, shared memory, barriers, atomics or builtins in the body")
    mapped = [i for i in facts.indices if i.direct]
    by_axis = {i.axis: i for i in mapped}
    if len(mapped) != 2 or set(by_axis) != {"x", "y"}:
        raise _Unsupported("not a thread per (row, col)")
    row, col = by_axis["y"], by_axis["x"]
    if any(guard.bound_of(i.name) is None or i.declaration.parent != tree.body for i in (row, col)):
        raise _Unsupported("an index not bounded, or not declared at the kernel's top level")
    transposed: dict[str, list[Access]] = {}
    for access in facts.accesses:
        lane, down = access.stride(LANE), access.stride("threadIdx.y")
        if lane is not None and lane.value() in (0, 1):
            continue
        if access.write or down != Form.constant(1):
            raise _Unsupported(f"{access.array}: strided otherwise than down a column")
        transposed.setdefault(_squeezed(tree.text(access.node)), []).append(access)
    if not transposed:
        raise _Unsupported("no read down a column")
    staged, names = [], local_names(tree, *(f"{a[0].array}_tile" for a in transposed.values()))
    for accesses in transposed.values():
        first = accesses[0]
        element = element_type(tree.parameter(first.array))
        if element is None or not _placed_by(tree, first.node, {row.name, col.name}):
            raise _Unsupported(f"{first.array}: read through more than the row, the col and the sizes")
        if any(_conditional(a, guard.statement, tree.body) for a in accesses):
            raise _Unsupported(f"{first.array}: read under a condition")
        tile = names[f"{first.array}_tile"]
        staged.append(
            _Staged(first.array, tree.text(first.node), tuple(a.node for a in accesses), tile, element)
        )
    return row, col, staged


def _placed_by(tree: KernelTree, node: Node, indices: set[str]) -> bool:
    """Whether the read's place depends on the thread only through the indices: every name it reads is
    one of them or no local of the kernel (a parameter, a macro), and no builtin."""
    locals_ = declared_names(tree.body, tree) - indices
    return not any(b in tree.text(node) for b in _BUILTINS) and not identifiers(node) & locals_


def _conditional(access: Access, guard: Node, body: Node) -> bool:
    """Whether the read is made only on some paths under the bounds check (an `if`, `?:`, `&&`, a loop
    the analysis does not count, a `switch`)."""
    try:
        conditions = path_conditions(access.node, guard)
    except ValueError:
        return True
    switched = any(n.type == "switch_statement" for n in ancestors(body, access.node))
    return bool(conditions or access.loops or switched)


def _launch(tree: KernelTree, facts: KernelFacts, row: ThreadIndex, col: ThreadIndex) -> LaunchSpec:
    assert facts.guard is not None
    row_bound, col_bound = facts.guard.bound_of(row.name), facts.guard.bound_of(col.name)
    assert row_bound is not None and col_bound is not None
    try:
        rows, cols = bound_terms(tree, row_bound.bound)[1], bound_terms(tree, col_bound.bound)[1]
    except NotInSizes as exc:
        raise _Unsupported(str(exc)) from exc
    return LaunchSpec(block=(TILE, ROWS), grid=(f"ceil_div({cols}, {TILE})", f"ceil_div({rows}, {TILE})"))


def _body(
    tree: KernelTree, facts: KernelFacts, row: ThreadIndex, col: ThreadIndex, staged: list[_Staged]
) -> str:
    guard = facts.guard
    assert guard is not None
    n = local_names(tree, "row0", "col0", "k")
    row0, col0, k = n["row0"], n["col0"], n["k"]
    row_bound, col_bound = guard.bound_of(row.name), guard.bound_of(col.name)
    assert row_bound is not None and col_bound is not None
    inside = f"{row.name} < {row_bound.bound_text} && {col.name} < {col_bound.bound_text}"
    tiles = "\n".join(f"    __shared__ {s.element} {s.tile}[{TILE}][{TILE} + 1];" for s in staged)
    loads = "\n".join(f"            {s.tile}[{k}][threadIdx.x] = {s.written};" for s in staged)
    replaced = {node.start_byte: f"{s.tile}[threadIdx.x][{k}]" for s in staged for node in s.nodes}
    rest = _per_output(tree, row, col, guard.statement, guard.early_return, replaced)
    return f"""{{
    // A {TILE} x {TILE} tile of outputs a block of {TILE} x {ROWS} threads. The reads down a column are
    // loaded first, the tile's (row, col) swapped between the threads so that a warp loads a row of them,
    // then each thread reads them from shared memory for its {TILE // ROWS} outputs (+1: the column reads
    // hit every bank).
{tiles}
    const int {row0} = blockIdx.y * {TILE}, {col0} = blockIdx.x * {TILE};
    for (int {k} = threadIdx.y; {k} < {TILE}; {k} += {ROWS}) {{
        const int {row.name} = {row0} + threadIdx.x, {col.name} = {col0} + {k};
        if ({inside}) {{
{loads}
        }}
    }}
    __syncthreads();
    for (int {k} = threadIdx.y; {k} < {TILE}; {k} += {ROWS}) {{
        const int {row.name} = {row0} + {k}, {col.name} = {col0} + threadIdx.x;
{rest}
    }}
}}"""


def _per_output(
    tree: KernelTree,
    row: ThreadIndex,
    col: ThreadIndex,
    guard: Node,
    early_return: bool,
    replaced: dict[int, str],
) -> str:
    """The kernel's statements after the indices, for one output, the staged reads replaced: the early
    return of a bounds check a `continue` (the thread's other outputs still run)."""
    pieces = []
    for statement in statements(tree.body):
        if statement in (row.declaration, col.declaration):
            continue
        returns = [n for n in walk(statement) if n.type == "return_statement"]
        if returns and not (early_return and statement == guard):
            raise _Unsupported("a return other than the bounds check's")

        def substitute(node: Node) -> str | None:
            if node.type == "return_statement":
                return "continue;"
            return replaced.get(node.start_byte) if node.type == "subscript_expression" else None

        pieces.append("        " + tree.substituted(statement, substitute).replace("\n", "\n    "))
    return "\n".join(pieces)


def _squeezed(written: str) -> str:
    return "".join(written.split())
