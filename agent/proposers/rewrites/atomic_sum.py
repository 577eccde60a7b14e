"""An atomic add inside a loop, into a place the loop does not move -> the thread's values summed in a
register, one atomic after the loop.

Driven by the analysis: `atomicAdd(&sums[c], x[row * HW + col])` in a loop over `col`, where `c` is
computed before the loop (a channel's sum, a row's total, a bin chosen once), costs one atomic an
iteration, all of them on one address and each a round trip to L2. The atomics' order is the hardware's
anyway; adding the thread's values first and the total once changes only where the additions round,
which the spec's tolerance for a reduction covers (an assumption the candidate states; integers are
exact). The loop is then an ordinary sum, which `rewrite:warp-per-output` splits across a warp or a
block with one atomic a warp or a block (a thread per (n, c) row of an NCHW tensor, as `rewrite:row-loop`
leaves a thread an element that added into its channel).

Offered where the atomic is a statement of its own (its old value unused), its place reads nothing the
loop assigns or declares, the loop cannot be left by `return`, and the array is reached nowhere else in
the kernel (no other thread's read could see a partial total).
"""

from __future__ import annotations

from cuda_agent.agent.analysis import analysed, assigned_names
from cuda_agent.agent.analysis.facts import Access, Loop
from cuda_agent.agent.analysis.values import text, unwrap
from cuda_agent.agent.candidates import Candidate
from cuda_agent.agent.proposers.tree import (
    Edit,
    KernelTree,
    arguments,
    candidate_from,
    declared_names,
    element_type,
    fresh_names,
    line_indent,
    walk,
)
from cuda_agent.agent.targets import KernelTarget

PROPOSER = "rewrite:atomic-sum"
ADDS = frozenset({"atomicAdd", "atomicAdd_block", "atomicAdd_system"})
# the element types an atomicAdd takes that a register sum starts from zero in
_TYPES = frozenset({"float", "double", "int", "unsigned int", "unsigned", "unsigned long long int",
                    "unsigned long long"})  # fmt: skip


class _Unsupported(Exception):
    """The atomic cannot wait for the loop's end here; the message says why (for debugging)."""


def propose(target: KernelTarget) -> list[Candidate]:
    found = analysed(target)
    if found is None:
        return []
    tree, facts = found
    if not facts.atomics or facts.barriers:
        return []
    edits: list[Edit] = []
    places: list[str] = []
    taken = tree.names()
    for access in facts.accesses:
        loop = facts.innermost_loop(access.node)
        if loop is None or access.node.type != "call_expression":
            continue
        try:
            edits += _summed(tree, facts.accesses, loop, access, taken)
        except _Unsupported:
            continue
        places.append(tree.text(arguments(access.node)[0]).lstrip("&").strip())
    if not edits:
        return []
    what = ", ".join(places)
    return [
        candidate_from(
            target,
            tree.apply_to_file(edits),
            description=f"a thread's additions to {what} summed in a register, one atomic after the loop",
            proposer=PROPOSER,
            assumptions=(
                f"the additions to {what} reassociated: a thread's values summed first (floating point: "
                "rounding within the reduction's tolerance)",
            ),
        )
    ]


def _summed(
    tree: KernelTree, accesses: list[Access], loop: Loop, atomic: Access, taken: set[str]
) -> list[Edit]:
    call = atomic.node
    function = call.child_by_field_name("function")
    if function is None or text(function) not in ADDS or len(arguments(call)) != 2:
        raise _Unsupported("not an atomic add")
    statement = call.parent
    if statement is None or statement.type != "expression_statement":
        raise _Unsupported("the atomic's old value is used")
    if any(a is not atomic and a.array == atomic.array for a in accesses):
        raise _Unsupported("the array is reached elsewhere: another thread could read a partial total")
    if any(n.type in ("return_statement", "goto_statement") for n in walk(loop.body)):
        raise _Unsupported("the loop may be left without reaching the atomic after it")
    place, value = arguments(call)
    changed = assigned_names(loop.node) | {loop.variable}
    declared = declared_names(loop.body, tree)
    if {text(n) for n in walk(place) if n.type == "identifier"} & (changed | declared):
        raise _Unsupported("the place moves with the loop")
    element = _element_type(tree, atomic.array)
    (name,) = fresh_names(taken, f"{atomic.array}_sum")
    indent = line_indent(tree, loop.node)
    return [
        (loop.node.start_byte, loop.node.start_byte, f"{element} {name} = 0;\n{indent}"),
        (statement.start_byte, statement.end_byte, f"{name} += {tree.text(unwrap(value))};"),
        (loop.node.end_byte, loop.node.end_byte, f"\n{indent}{text(function)}({tree.text(place)}, {name});"),
    ]


def _element_type(tree: KernelTree, array: str) -> str:
    element = element_type(tree.parameter(array))
    if element not in _TYPES:
        raise _Unsupported(f"{array}: not a parameter whose sum starts at 0 here")
    return element
