"""A sum kept in memory -> the same sum kept in a register (scalar replacement).

Driven by the analysis: inside a loop, an element whose place does not move with the loop (`tmp[i] +=
A[i * n + j] * x[j]`, PolyBench's way of writing every sum) is loaded once before the loop, updated in a
register, and stored once after it; a store of a number just before the loop (`tmp[i] = 0.0f;`) becomes
the register's start. Nothing is reassociated; what it assumes is that the element is not also reached
through another pointer the loop reads. The loop is then an ordinary reduction, which the other
rewrites (a warp or a block per output, a tiled contraction) can take further.
"""

from __future__ import annotations

from cuda_agent.agent.analysis import KernelFacts, analysed, assigned_names
from cuda_agent.agent.analysis.facts import Access, Loop
from cuda_agent.agent.analysis.forms import Form
from cuda_agent.agent.analysis.values import text, unwrap
from cuda_agent.agent.candidates import Candidate
from cuda_agent.agent.proposers.tree import (
    Edit,
    KernelTree,
    candidate_from,
    declared_names,
    fresh_names,
    line_indent,
    walk,
)
from cuda_agent.agent.targets import KernelTarget
from tree_sitter import Node

PROPOSER = "rewrite:promote"


class _Unsupported(Exception):
    """The element cannot be kept in a register here; the message says why (for debugging)."""


def propose(target: KernelTarget) -> list[Candidate]:
    found = analysed(target)
    if found is None:
        return []
    tree, facts = found
    if facts.barriers or facts.atomics or facts.unmodelled:
        return []
    edits: list[Edit] = []
    places: list[str] = []
    done: set[int] = set()  # accesses an enclosing loop already keeps in a register
    taken = tree.names()
    for loop in facts.loops:  # outermost first: a sum is kept across as many loops as it can be
        for group in _invariant_elements(facts, loop):
            if any(a.node.start_byte in done for a in group):
                continue
            try:
                loop_edits = _promoted(tree, facts, loop, group, taken)
            except _Unsupported:
                continue
            edits += loop_edits
            done.update(a.node.start_byte for a in group)
            places.append(tree.text(group[0].node))
    if not edits:
        return []
    registers = "registers" if len(places) > 1 else "a register"
    return [
        candidate_from(
            target,
            tree.apply_to_file(edits),
            description=f"{', '.join(places)} kept in {registers} through the loop",
            proposer=PROPOSER,
            assumptions=tuple(
                f"{p} is not also reached through another pointer its loop reads" for p in places
            ),
        )
    ]


def _inside(outer: Loop, inner: Loop) -> bool:
    return outer.node.start_byte < inner.node.start_byte and inner.node.end_byte <= outer.node.end_byte


def _invariant_elements(facts: KernelFacts, loop: Loop) -> list[list[Access]]:
    """The stored elements of the loop whose place is the same on every iteration, inner loops included."""
    inside = facts.accesses_in(loop)
    inner = [v for v in {v for a in inside for v in a.loops} if v != "?"]
    groups: dict[str, list[Access]] = {}
    for access in inside:
        groups.setdefault(access.array, []).append(access)
    found = []
    for accesses in groups.values():
        if not any(a.write for a in accesses):
            continue
        offsets = {a.offset.text() for a in accesses}
        moves = any(a.stride(v) != Form() for a in accesses for v in inner if v in a.loops)
        if len(offsets) == 1 and not moves and "?" not in accesses[0].loops:
            found.append(accesses)
    return found


def _promoted(
    tree: KernelTree, facts: KernelFacts, loop: Loop, group: list[Access], taken: set[str]
) -> list[Edit]:
    if any(n.type in ("return_statement", "goto_statement") for n in walk(loop.body)):
        raise _Unsupported("the loop may be left without reaching its end")
    first = group[0].node
    if first.type != "subscript_expression" or any(a.node.type != "subscript_expression" for a in group):
        raise _Unsupported("not a subscript")
    changed = assigned_names(loop.node)
    declared_inside = declared_names(loop.node, tree)
    names_used = {text(n) for n in walk(first) if n.type == "identifier"}
    if names_used & (changed | declared_inside):
        raise _Unsupported("the element's place is computed inside the loop")
    parameter = tree.parameter(group[0].array)
    if parameter is None:
        raise _Unsupported("not a parameter's element")
    place = tree.text(first)
    name = _fresh(place, taken)
    indent = line_indent(tree, loop.node)
    stored = _stored_before(tree, loop, place)
    start = tree.text(stored[1]) if stored is not None else place
    edits: list[Edit] = [
        (loop.node.start_byte, loop.node.start_byte, f"{parameter.type} {name} = {start};\n{indent}")
    ]
    if stored is not None:
        # the number's store is dead now: the register starts from it and the element is stored after
        # the loop (one store fewer, and none before the loop to keep in order with other threads')
        edits.append(_deleted_line(tree, stored[0]))
    edits += [(a.node.start_byte, a.node.end_byte, name) for a in group]
    edits.append((loop.node.end_byte, loop.node.end_byte, f"\n{indent}{place} = {name};"))
    return edits


def _deleted_line(tree: KernelTree, statement: Node) -> Edit:
    """The statement taken out with its line where it is alone on it (else just the statement)."""
    start = tree.data.rfind(b"\n", 0, statement.start_byte) + 1
    end = tree.data.find(b"\n", statement.end_byte)
    alone = tree.data[start : statement.start_byte].strip() == b"" and (
        end == -1 or tree.data[statement.end_byte : end].strip() == b""
    )
    if alone and end != -1:
        return (start, end + 1, "")
    return (statement.start_byte, statement.end_byte, "")


def _stored_before(tree: KernelTree, loop: Loop, place: str) -> tuple[Node, Node] | None:
    """(the statement, the number) where a statement right before the loop stores a number to the
    element (`tmp[i] = 0.0f;`), to start the register from it, so a reduction sees its identity."""
    previous = loop.node.prev_named_sibling
    array = place.split("[")[0]
    while previous is not None and previous.type in ("expression_statement", "declaration", "comment"):
        if previous.type != "expression_statement":
            # `int j;` (a C89 loop counter) or a comment: nothing that could store to the element
            if previous.type == "declaration" and (
                array in {text(n) for n in walk(previous) if n.type == "identifier"}
                or any(n.type in ("call_expression", "assignment_expression") for n in walk(previous))
            ):
                return None
            previous = previous.prev_named_sibling
            continue
        expression = unwrap(previous.named_children[0]) if previous.named_children else None
        if expression is None or expression.type != "assignment_expression":
            return None
        left, operator, right = (expression.child_by_field_name(f) for f in ("left", "operator", "right"))
        if left is None or operator is None or right is None or operator.type != "=":
            return None
        if tree.text(unwrap(left)) == place:
            return (previous, right) if unwrap(right).type == "number_literal" else None
        if array == tree.text(unwrap(left)).split("[")[0]:
            return None  # another element of the same array: keep to the load
        previous = previous.prev_named_sibling
    return None


def _fresh(place: str, taken: set[str]) -> str:
    stem = "".join(c if c.isalnum() or c == "_" else " " for c in place.split("[")[0]).split()[-1]
    (name,) = fresh_names(taken, f"{stem}_sum")
    return name
