"""A thread's row re-read on every iteration of an outer loop -> the row read once into registers.

Driven by the analysis: an inner loop over `d` reads `P[base + d]` (one element apart along `d`, a row
apart between neighbouring threads) inside an outer loop that does not move it: the k-means assignment
(`points[i * D + d]` for each of K centroids), a kNN query against every reference, a thread computing a
row of distances. Each iteration of the outer loop reads the thread's whole row again, every load of a
warp touching 32 cache lines. Where the row is short at the benchmark's sizes (at most MAX_ELEMENTS),
the thread reads it once before the outer loop into an array the compiler keeps in registers (the inner
loop unrolled to that length, each element guarded by the row's real length), and the inner loop reads
the registers. A longer row at run time takes the loops as written.

Offered where every access to P is such a read inside the inner loop (P is never stored to), the inner
loop counts from 0 in unit steps, and the row's place reads nothing the outer loop assigns or declares.
What it assumes: P is not written through another pointer while the kernel runs.
"""

from __future__ import annotations

from cuda_agent.agent.analysis import KernelFacts, analysed, assigned_names
from cuda_agent.agent.analysis.facts import Loop
from cuda_agent.agent.analysis.forms import LANE, Form
from cuda_agent.agent.analysis.values import text
from cuda_agent.agent.candidates import Candidate
from cuda_agent.agent.proposers.rewrites._bounds import NotInSizes, as_factor, at_benchmark, bound_terms
from cuda_agent.agent.proposers.tree import (
    CACHED_LOADS,
    Edit,
    KernelTree,
    arguments,
    candidate_from,
    declared_names,
    element_type,
    fresh_names,
    line_indent,
    reindent,
    statements,
    walk,
)
from cuda_agent.agent.targets import KernelTarget
from tree_sitter import Node

PROPOSER = "rewrite:held-row"
# The most elements a thread holds: 64 floats leave registers for the loops' own values (a k-means
# assignment's 32 coordinates: 40 registers a thread with them held).
MAX_ELEMENTS = 64
_TYPES = frozenset({"float", "double", "int", "unsigned int", "unsigned", "__half", "half", "__nv_bfloat16"})


class _Unsupported(Exception):
    """The row cannot be held here; the message says why (for debugging)."""


def propose(target: KernelTarget) -> list[Candidate]:
    found = analysed(target)
    if found is None or target.spec is None:
        return []
    tree, facts = found
    if facts.uses_shared or facts.barriers or facts.unmodelled:
        return []
    taken = tree.names()
    for inner in facts.loops:
        outer = facts.innermost_loop(inner.node)
        if outer is None:
            continue
        for array in dict.fromkeys(a.array for a in facts.accesses_in(inner)):
            try:
                edits, held = _held(tree, facts, outer, inner, array, taken)
            except (_Unsupported, NotInSizes):
                continue
            return [
                candidate_from(
                    target,
                    tree.apply_to_file(edits),
                    description=f"the thread's row {held} held in registers, read once instead of once "
                    f"an iteration of {outer.variable}",
                    proposer=PROPOSER,
                    assumptions=(f"{array} is not written through another pointer while the kernel runs",),
                )
            ]
    return []


def _held(
    tree: KernelTree, facts: KernelFacts, outer: Loop, inner: Loop, array: str, taken: set[str]
) -> tuple[list[Edit], str]:
    reads = [a for a in facts.accesses if a.array == array]
    inside = facts.accesses_in(inner)
    if any(a.write or a not in inside or a.node.type != "subscript_expression" for a in reads):
        raise _Unsupported("the array is stored to, or read outside the inner loop")
    if len({a.offset.text() for a in reads}) != 1 or any(a.hidden for a in reads):
        raise _Unsupported("not one row element a step")
    access = reads[0]
    d = inner.variable
    if access.stride(d) != Form.constant(1) or access.stride(outer.variable) != Form():
        raise _Unsupported("the row does not walk along the inner loop, or moves with the outer one")
    if access.stride(LANE) in (None, Form(), Form.constant(1)):
        raise _Unsupported("neighbouring threads share the row or read it together already")
    if inner.start.value() != 0 or inner.step.value() != 1:
        raise _Unsupported("the inner loop does not count from 0 in unit steps")
    length = at_benchmark(tree, inner.bound)
    if length is None or not 0 < length <= MAX_ELEMENTS:
        raise _Unsupported("the row is not short at the benchmark's sizes")
    changed = assigned_names(outer.node) | {outer.variable}
    declared = declared_names(outer.node, tree)
    place = {text(n) for n in walk(access.node) if n.type == "identifier"} - {d}
    if place & (changed | declared):
        raise _Unsupported("the row's place is computed inside the outer loop")
    # read before the outer loop, the row must be one the original reads whatever the conditions inside
    # it say: none between the loops may test the row's place (`if (i < limit)` could guard its existence)
    node = inner.node.parent
    while node is not None and node != outer.node:
        condition = node.child_by_field_name("condition")
        if condition is not None and place & {text(n) for n in walk(condition) if n.type == "identifier"}:
            raise _Unsupported("the inner loop runs under a condition on the row's place")
        node = node.parent
    element = _element_type(tree, array)
    bound = as_factor(bound_terms(tree, inner.bound)[0])
    held = ((length + 3) // 4) * 4
    row, flag, u = fresh_names(taken, f"{array}_row", f"{array}_held", "u")
    indent, inner_indent = line_indent(tree, outer.node), line_indent(tree, inner.node)
    at_u = tree.substituted(access.node, lambda n: u if n.type == "identifier" and text(n) == d else None)
    reads_held = {_span(_loaded(a.node)) for a in reads}
    shown = f"{array}[{tree.text(access.node).split('[', 1)[1].rstrip(']')}]"
    if inner.bound.value() is not None:
        # a length known when compiled (a macro): the row's own size, the loops as written, unrolled
        return [
            (
                outer.node.start_byte,
                outer.node.start_byte,
                f"// the thread's row of {array} ({tree.text(access.node)}, {d} < {bound}) read once\n"
                f"{indent}{element} {row}[{length}];\n"
                f"{indent}#pragma unroll\n"
                f"{indent}for (int {u} = 0; {u} < {length}; ++{u}) {row}[{u}] = {at_u};\n{indent}",
            ),
            (inner.node.start_byte, inner.node.start_byte, f"#pragma unroll\n{inner_indent}"),
            *((start, end, f"{row}[{d}]") for start, end in sorted(reads_held)),
        ], shown
    loads = (
        f"// the thread's row of {array} ({tree.text(access.node)}, {d} < {bound}) read once into registers\n"
        f"{indent}{element} {row}[{held}];\n"
        f"{indent}const bool {flag} = {bound} <= {held};\n"
        f"{indent}if ({flag}) {{\n"
        f"{indent}    #pragma unroll\n"
        f"{indent}    for (int {u} = 0; {u} < {held}; ++{u})\n"
        f"{indent}        if ({u} < {bound}) {row}[{u}] = {at_u};\n"
        f"{indent}}}\n{indent}"
    )
    deeper = inner_indent + "        "
    held_body = "\n".join(
        deeper
        + reindent(
            tree.substituted(
                s, lambda n: f"{row}[{d}]" if (n.start_byte, n.end_byte) in reads_held else None
            ),
            line_indent(tree, s),
            deeper,
        ).lstrip()
        for s in (statements(inner.body) if inner.body.type == "compound_statement" else [inner.body])
    )
    as_written = reindent(tree.text(inner.node), inner_indent, inner_indent + "    ").lstrip()

    def unrolled(checked: bool) -> str:
        check = f"{inner_indent}        if ({d} >= {bound}) break;\n" if checked else ""
        return (
            f"{inner_indent}    #pragma unroll\n"
            f"{inner_indent}    for (int {d} = 0; {d} < {held}; ++{d}) {{\n"
            f"{check}{held_body}\n"
            f"{inner_indent}    }}\n"
        )

    loops = unrolled(checked=True)
    if length == held:  # the length is known only at run time here (a compile-time one returned above)
        # the benchmark's length exactly: a copy of the loop for it has no test an element, and the
        # compiler folds the length into the other loads' offsets (the k-means centroid's `k * D + d`)
        loops = (
            f"{inner_indent}    if ({bound} == {held}) {{  // the row's length at the benchmark's sizes\n"
            f"{_deeper(unrolled(checked=False), '    ')}"
            f"{inner_indent}    }} else {{\n"
            f"{_deeper(loops, '    ')}"
            f"{inner_indent}    }}\n"
        )
    otherwise = f"{inner_indent}}} else {{\n{inner_indent}    {as_written}\n{inner_indent}}}"
    fast = f"if ({flag}) {{\n{loops}{otherwise}"
    edits: list[Edit] = [
        (outer.node.start_byte, outer.node.start_byte, loads),
        (inner.node.start_byte, inner.node.end_byte, fast),
    ]
    return edits, shown


def _deeper(lines: str, by: str) -> str:
    return "".join(by + line if line.strip() else line for line in lines.splitlines(keepends=True))


def _loaded(access: Node) -> Node:
    """The expression whose value is the element: the access, or the load intrinsic taking its address.
    Any other use of its address (a cast to a vector pointer, a pointer passed on) is refused: a register
    has no address in global memory."""
    parent = access.parent
    if parent is None or parent.type != "pointer_expression":
        return access
    call = parent.parent.parent if parent.parent is not None else None
    function = (
        call.child_by_field_name("function") if call is not None and call.type == "call_expression" else None
    )
    if call is None or function is None or text(function) not in CACHED_LOADS or len(arguments(call)) != 1:
        raise _Unsupported("the element's address is taken")
    return call


def _span(node: Node) -> tuple[int, int]:
    return node.start_byte, node.end_byte


def _element_type(tree: KernelTree, array: str) -> str:
    element = element_type(tree.parameter(array))
    if element not in _TYPES:
        raise _Unsupported(f"{array}: not a parameter whose element type is held here")
    return element
