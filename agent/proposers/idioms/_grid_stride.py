"""A thread-per-element kernel seen as a loop body: what atomic reductions and histograms share.

`int i = blockIdx.x * blockDim.x + threadIdx.x; if (i < n) { ... }` (or `if (i >= n) return; ...`) is
the body of `for (i = first; i < n; i += stride)` in disguise. Rewritten as that grid-stride loop, a
block can keep a private partial result (registers, shared memory) across many elements and publish
it once, which is the whole point of both idioms.
"""

from __future__ import annotations

from dataclasses import dataclass

from cuda_agent.agent.proposers.tree import (
    KernelTree,
    arguments,
    calls,
    guarded_region,
    has_any,
    identifiers,
    index_variables,
    single_declaration,
    strip_parens,
    walk,
    writes,
)
from tree_sitter import Node

ATOMICS = (
    *("atomicAdd", "atomicSub", "atomicMax", "atomicMin", "atomicExch", "atomicCAS", "atomicAnd"),
    *("atomicOr", "atomicXor", "atomicInc", "atomicDec", "atomicAdd_block", "atomicAdd_system"),
)
_BUILTINS = frozenset({"threadIdx", "blockIdx", "blockDim", "gridDim"})


@dataclass(frozen=True)
class ElementLoop:
    index: str  # the user's element index name
    index_type: str  # as declared: "int", "unsigned", "size_t"
    bound: str  # the guard's bound, as written: "n"
    statements: list[Node]  # per element, in order (declarations before the guard first)
    atomic: Node  # the one atomic call
    function: str  # its name: "atomicAdd"
    address: Node  # its first argument
    value: Node  # its second argument


def element_loop(tree: KernelTree) -> ElementLoop | None:
    """The kernel as one element's work with exactly one atomic and no other store to memory."""
    spec = tree.target.spec
    if spec is None or len(spec.launch.block) != 1 or len(spec.launch.grid) != 1:
        return None
    indices = index_variables(tree.body)
    guarded = guarded_region(tree)
    if guarded is None or len(indices) != 1:
        return None
    ((index, (axis, declaration)),) = indices.items()
    if axis != "x" or set(guarded.bounds) != {index}:
        return None
    declared = single_declaration(declaration, tree)
    if declared is None:
        return None
    before = [s for s in guarded.prefix if s != declaration]
    work = [*before, *guarded.statements]
    if any(s.type != "declaration" for s in before):
        return None
    found = [c for s in work for c in calls(s, ATOMICS)]
    if len(found) != 1:
        return None
    atomic = found[0]
    function = atomic.child_by_field_name("function")
    args = arguments(atomic)
    if function is None or len(args) != 2 or strip_parens(atomic.parent).type != "expression_statement":
        return None
    for statement in work:
        # The loop body must finish every element: no return or break out of it, no barriers, no other
        # thread geometry (the index is now the loop's), and no store but the atomic.
        if has_any(statement, {"return_statement", "break_statement", "goto_statement"}):
            return None
        if identifiers(statement) & _BUILTINS or calls(statement, ["__syncthreads", "__syncwarp"]):
            return None
        if any(w.type != "identifier" for w in writes(statement, tree)):
            return None
        if any(n.type == "identifier" and tree.text(n) == index for n in _assigned(statement, tree)):
            return None
    return ElementLoop(
        index=index,
        index_type=declared[0],
        bound=guarded.bounds[index],
        statements=work,
        atomic=atomic,
        function=tree.text(function),
        address=args[0],
        value=args[1],
    )


def _assigned(statement: Node, tree: KernelTree) -> list[Node]:
    return [n for n in writes(statement, tree) if n.type == "identifier"]


def loop_body(tree: KernelTree, loop: ElementLoop, replacement: str, indent: str) -> str:
    """The element's statements with the atomic call's text replaced, re-indented one level deeper."""
    parts = []
    for statement in loop.statements:
        text = tree.data[statement.start_byte : statement.end_byte]
        if statement.start_byte <= loop.atomic.start_byte < statement.end_byte:
            begin, end = (
                loop.atomic.start_byte - statement.start_byte,
                loop.atomic.end_byte - statement.start_byte,
            )
            text = text[:begin] + replacement.encode("utf-8") + text[end:]
        lines = text.decode("utf-8").splitlines()
        # Continuation lines keep their shape relative to the statement's first line.
        base = _leading(tree, statement)
        shifted = [ln[len(base) :] if ln.startswith(base) else ln.lstrip() for ln in lines[1:]]
        parts.append("\n".join(indent + ln for ln in [lines[0], *shifted]))
    return "\n".join(parts)


def _leading(tree: KernelTree, node: Node) -> str:
    line_start = tree.data.rfind(b"\n", 0, node.start_byte) + 1
    return tree.data[line_start : node.start_byte].decode("utf-8")


def grid_stride_header(loop: ElementLoop) -> str:
    i = loop.index
    # Unrolled so each thread has several independent loads in flight (the loop is latency-bound).
    return (
        f"#pragma unroll 4\n    for ({loop.index_type} {i} = blockIdx.x * blockDim.x + threadIdx.x; "
        f"{i} < {loop.bound}; {i} += blockDim.x * gridDim.x)"
    )


UNROLL = 4


def unrolled_grid_stride(tree: KernelTree, loop: ElementLoop, fold: str, names: dict[str, str]) -> str:
    """The grid-stride loop over the elements in steps of UNROLL elements a thread with no bound check
    between them, then the tail one at a time. `#pragma unroll` on a loop guarded by `i < n` cannot
    overlap the loads: each may be past the end until the check before it passed. Here the step's loads
    are all in bounds by its own check, so they go out together (a reduction is latency-bound: this is
    the difference between half and most of the memory bandwidth). `names` gives fresh "first",
    "stride" and "k"."""
    i, kind = loop.index, loop.index_type
    bound = loop.bound if loop.bound.isidentifier() else f"({loop.bound})"
    first, stride, k = names["first"], names["stride"], names["k"]
    span = f"{UNROLL - 1} * {stride}"
    return f"""const {kind} {stride} = blockDim.x * gridDim.x;
    {kind} {first} = blockIdx.x * blockDim.x + threadIdx.x;
    // {UNROLL} elements a step, all in bounds by the step's check, so their loads overlap.
    if ({span} < {bound}) {{
        for (; {first} < {bound} - {span}; {first} += {UNROLL} * {stride}) {{
            #pragma unroll
            for (int {k} = 0; {k} < {UNROLL}; ++{k}) {{
                const {kind} {i} = {first} + {k} * {stride};
{loop_body(tree, loop, fold, "                ")}
            }}
        }}
    }}
    for ({kind} {i} = {first}; {i} < {bound}; {i} += {stride}) {{
{loop_body(tree, loop, fold, "        ")}
    }}"""


def node_walk_has_index(node: Node, tree: KernelTree, index: str) -> bool:
    return any(n.type == "identifier" and tree.text(n) == index for n in walk(node))
