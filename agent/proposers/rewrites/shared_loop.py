"""A loop one thread runs while its block waits -> the block's threads share it.

First drafts often leave a reduction to thread 0 (`if (tid == 0) { for (j = 0; j < start; ++j) s += x[j];
carry = s; } __syncthreads();`): a block's carry, a normaliser, a total. Every other thread idles at the
barrier while one walks the whole loop. Driven by the analysis (agent/analysis/): wherever such an `if`
on thread 0 sits at the top of the kernel (every thread of the block reaches it), holds a counted loop
with independent iterations and reductions of a known combine, and the loop's bounds and loads are the
same for every thread of the block (they depend on no thread index), the loop starts at the thread's
index and steps by the block's size, the partial results are combined through warp shuffles and shared
memory (every thread then holds the result), and what followed the loop inside the `if` is still done by
thread 0 alone.
"""

from __future__ import annotations

from dataclasses import dataclass

from cuda_agent.agent.analysis import KernelFacts, analysed
from cuda_agent.agent.analysis.dependence import dependent_locals
from cuda_agent.agent.analysis.facts import FIND_FIRST, Loop
from cuda_agent.agent.analysis.forms import Form
from cuda_agent.agent.analysis.values import unwrap
from cuda_agent.agent.candidates import Candidate
from cuda_agent.agent.proposers.rewrites._combine import (
    BLOCK,
    Unsupported,
    across_lanes,
    check_initial,
    strided,
)
from cuda_agent.agent.proposers.tree import (
    Edit,
    KernelTree,
    apply_to_body,
    build_candidate,
    declared_names,
    is_barrier,
    line_indent,
    local_names,
    reindent,
    statements,
    walk,
    writes,
)
from cuda_agent.agent.targets import KernelTarget
from tree_sitter import Node

PROPOSER = "rewrite:shared-loop"
THREAD_BUILTINS = frozenset(f"{name}.{axis}" for name in ("threadIdx",) for axis in "xyz")
# Calls a loop shared by the block must not make: each would run once a thread instead of once.
_EFFECTS = ("printf", "atomic", "__sync", "__threadfence", "assert", "malloc", "free")


class _Unsupported(Exception):
    """Not this shape, or not provably the same results; the message says why (for debugging)."""


@dataclass(frozen=True)
class Solo:
    """`if (tid == 0) { declarations and loops...; rest... }` at the kernel's top level."""

    statement: Node
    condition: str  # as written, without its parentheses
    moved: list[Node]  # the declarations and reduction loops the block now shares (comments included)
    loops: list[Loop]  # the loops among them
    rest: list[Node]  # what thread 0 still does alone (comments included)


def propose(target: KernelTarget) -> list[Candidate]:
    found = analysed(target)
    if found is None or target.spec is None:
        return []
    tree, facts = found
    block = target.spec.launch.block
    if any(b != 1 for b in block[1:]) or block[0] % 32 or block[0] > 1024:
        return []  # `threadIdx.x == 0` is one thread, and whole warps shuffle
    for solo in solos(tree, facts):
        try:
            body, assumptions = _rewrite(tree, facts, solo)
        except (_Unsupported, Unsupported):
            continue
        loops = ", ".join(dict.fromkeys(loop.variable for loop in solo.loops))
        return [  # one rewrite at a time: the search builds on it
            build_candidate(
                tree,
                body=body,
                launch=target.spec.launch,
                description=(
                    f"loop {loops} shared by the block's {block[0]} threads "
                    "(thread 0 ran it alone while the block waited)"
                ),
                proposer=PROPOSER,
                assumptions=assumptions,
            )
        ]
    return []


def solos(tree: KernelTree, facts: KernelFacts) -> list[Solo]:
    """Each top-level `if` on thread 0 that every thread of the block reaches (a return before it only
    under a condition the whole block shares), starting with declarations and counted loops."""
    found: list[Solo] = []
    zero = thread_zero_names(facts)
    varying = _varying(tree)
    loops = {loop.node.start_byte: loop for loop in facts.loops}
    for statement in tree.body.named_children:
        if returns(statement) and not _uniform_return(tree, statement, varying):
            break  # threads that left could not take part in the block's combine
        if statement.type != "if_statement" or statement.child_by_field_name("alternative") is not None:
            continue
        condition = statement.child_by_field_name("condition")
        consequence = statement.child_by_field_name("consequence")
        if condition is None or consequence is None or consequence.type != "compound_statement":
            continue
        if not is_thread_zero(tree, condition, zero):
            continue
        children = list(consequence.named_children)
        count = 0  # the leading declarations, loops and comments
        while count < len(children) and (
            children[count].type in ("declaration", "comment") or children[count].start_byte in loops
        ):
            count += 1
        while count and children[count - 1].start_byte not in loops:
            count -= 1  # what follows the last loop stays with thread 0
        moved = children[:count]
        shared = [loops[c.start_byte] for c in moved if c.start_byte in loops]
        if shared:
            text = tree.text(_condition(condition))
            found.append(Solo(statement, text, moved, shared, children[count:]))
    return found


def _uniform_return(tree: KernelTree, statement: Node, varying: set[str]) -> bool:
    """`if (row >= rows) return;` with a row the whole block shares: the block leaves together."""
    if statement.type != "if_statement" or statement.child_by_field_name("alternative") is not None:
        return False
    condition = statement.child_by_field_name("condition")
    consequence = statement.child_by_field_name("consequence")
    if condition is None or consequence is None or _mentions_varying(tree, condition, varying):
        return False
    return [s.type for s in statements(consequence)] == ["return_statement"]


def thread_zero_names(facts: KernelFacts) -> set[str]:
    """Locals that are exactly `threadIdx.x`."""
    return {i.name for i in facts.indices if i.form == Form.atom("threadIdx.x")} | {"threadIdx.x"}


def _condition(node: Node) -> Node:
    """The expression of an `if`'s condition (tree-sitter wraps it in a condition clause)."""
    if node.type == "condition_clause" and node.named_child_count == 1:
        node = node.named_children[0]
    return unwrap(node)


def thread_name(facts: KernelFacts, solo: Solo) -> str:
    """The user's name for `threadIdx.x` where one is declared before the `if`, else the builtin."""
    for index in facts.indices:
        if index.form == Form.atom("threadIdx.x") and index.declaration.end_byte <= solo.statement.start_byte:
            return index.name
    return "threadIdx.x"


def is_thread_zero(tree: KernelTree, condition: Node, names: set[str]) -> bool:
    node = _condition(condition)
    if node.type == "unary_expression" and tree.text(node.child_by_field_name("operator") or node)[:1] == "!":
        argument = node.child_by_field_name("argument")
        return argument is not None and _spelled(tree, unwrap(argument)) in names
    if node.type != "binary_expression":
        return False
    operator = node.child_by_field_name("operator")
    left, right = node.child_by_field_name("left"), node.child_by_field_name("right")
    if operator is None or operator.type != "==" or left is None or right is None:
        return False
    sides = {_spelled(tree, unwrap(left)), _spelled(tree, unwrap(right))}
    return "0" in sides and bool(sides & names)


def _spelled(tree: KernelTree, node: Node) -> str:
    return "".join(tree.text(node).split())


def returns(statement: Node) -> bool:
    return any(n.type in ("return_statement", "goto_statement") for n in walk(statement))


def _rewrite(tree: KernelTree, facts: KernelFacts, solo: Solo) -> tuple[str, tuple[str, ...]]:
    if not [r for r in solo.rest if r.type != "comment"]:
        raise _Unsupported("nothing uses the loops' results")
    _check_uniform(tree, facts, solo)
    declared = set().union(*(declared_names(node, tree) for node in solo.moved))
    # the moved declarations join the kernel's outermost scope: its other declarations there and the
    # parameters' names must differ (one declared inside the if and again after it would otherwise clash)
    clashes = {p.name for p in tree.target.kernel.parameters}.union(
        *(declared_names(node, tree) for node in statements(tree.body) if node.type == "declaration")
    )
    if declared & clashes:
        raise _Unsupported("a moved declaration's name is declared elsewhere in the kernel")
    names = local_names(
        tree, "offset", "other", "other_at", "other_sum", "joint", "part", "w", "found", "other_found"
    )
    indent, inner = line_indent(tree, solo.statement), line_indent(tree, solo.moved[0])
    thread = thread_name(facts, solo)
    edits: list[Edit] = []
    assumptions: set[str] = set()
    for loop in solo.loops:
        if not loop.independent or loop.step.value() != 1 or not loop.reductions:
            raise _Unsupported(f"loop {loop.variable}: not independent iterations with a reduction")
        accumulators = {name for r in loop.reductions for name in r.accumulators}
        if not accumulators <= declared:
            raise _Unsupported("an accumulator declared outside the if")
        edits += strided(tree, loop, thread, "blockDim.x")
        for reduction in loop.reductions:
            if reduction.combine == FIND_FIRST:
                raise _Unsupported("a search shared by the block")
            check_initial(tree, loop, reduction)
            text, assumption = across_lanes(tree, loop, reduction, names, BLOCK, indent=inner)
            edits.append((loop.node.end_byte, loop.node.end_byte, text))
            if assumption:
                assumptions.add(assumption)
    start, end = solo.moved[0].start_byte, solo.moved[-1].end_byte
    shared = reindent(_applied(tree, start, end, edits), inner, indent)
    rest = tree.data[solo.rest[0].start_byte : solo.statement.end_byte].decode("utf-8")
    loops = ", ".join(dict.fromkeys(loop.variable for loop in solo.loops))
    comment = f"// the block's threads share loop {loops}; thread 0 then goes on alone"
    replacement = f"{comment}\n{shared}\n{indent}if ({solo.condition}) {{\n{inner}{rest}"
    body = apply_to_body(tree, [(solo.statement.start_byte, solo.statement.end_byte, replacement)])
    return body, tuple(sorted(assumptions))


def _check_uniform(tree: KernelTree, facts: KernelFacts, solo: Solo) -> None:
    """What every thread now runs must be what thread 0 ran: no thread-varying value, no memory this
    kernel also writes (another thread's earlier store may not be visible yet), shared memory only where
    a barrier settled it, no effects, and declarations only before the loop."""
    varying = _varying(tree)
    moved = solo.moved
    local = set().union(*(declared_names(node, tree) for node in moved)) | {
        loop.variable for loop in solo.loops
    }
    written = {a.array for a in facts.accesses if a.write}
    shared = _shared_names(tree)
    settled = _settled(tree, solo, shared)
    loops = {loop.node.start_byte for loop in solo.loops}
    for node in moved:
        if node.type == "declaration" and any(
            n.type in _SIDE_EFFECTS and not _pure(tree, n) for n in walk(node)
        ):
            raise _Unsupported("a declaration the block would repeat has an effect")
        if node.type == "declaration" and "__shared__" in tree.text(node):
            raise _Unsupported("a shared declaration among the moved ones")
        if node.start_byte not in loops and node.type not in ("declaration", "comment"):
            raise _Unsupported("the if does more than declare and loop before thread 0 goes on")
    for node in moved:
        for inner in walk(node):
            if inner.type == "field_expression" and _spelled(tree, inner) in THREAD_BUILTINS:
                raise _Unsupported("the loop reads a thread index")
            name = tree.text(inner) if inner.type == "identifier" else ""
            if name and name not in local and (name in varying or (name in shared and name not in settled)):
                raise _Unsupported(f"the loop reads {name}, which differs between threads or is shared")
            if inner.type == "call_expression":
                function = inner.child_by_field_name("function")
                called = tree.text(function) if function is not None else ""
                if called.startswith(_EFFECTS):
                    raise _Unsupported(f"the loop calls {called}")
    for loop in solo.loops:
        for access in facts.accesses_in(loop):
            if access.write or access.array in written:
                raise _Unsupported(f"the loop touches {access.array}, which the kernel writes")
    start, end = moved[0].start_byte, moved[-1].end_byte
    stored = {_base(tree, target) for node in moved for target in writes(node, tree)} - local
    if stored:
        raise _Unsupported(f"the loop stores to {', '.join(sorted(n for n in stored if n))}")
    for node in facts.unmodelled:
        if start <= node.start_byte < end and _base(tree, node) not in settled:
            raise _Unsupported("a load the analysis could not place")


def _settled(tree: KernelTree, solo: Solo, shared: set[str]) -> set[str]:
    """The shared names every thread may read inside the `if`: those a top-level barrier before it
    completed, with no store to them between that barrier and the `if`."""
    before = [s for s in tree.body.named_children if s.end_byte <= solo.statement.start_byte]
    barriers = [position for position, s in enumerate(before) if is_barrier(s, tree)]
    if not barriers:
        return set()
    since = before[barriers[-1] + 1 :]
    stored = {_base(tree, target) for statement in since for target in writes(statement, tree)}
    return shared - stored


def _base(tree: KernelTree, node: Node) -> str | None:
    """The array or variable an access reaches: `cache` of `cache[j]`, `s` of `s`."""
    node = unwrap(node)
    while node.type in ("subscript_expression", "field_expression", "pointer_expression"):
        inner = node.child_by_field_name("argument")
        if inner is None:
            return None
        node = unwrap(inner)
    return tree.text(node) if node.type == "identifier" else None


def _pure(tree: KernelTree, node: Node) -> bool:
    """A call the block may repeat (math on values); assignments and updates are effects."""
    if node.type != "call_expression":
        return False
    function = node.child_by_field_name("function")
    return function is not None and not tree.text(function).startswith(_EFFECTS)


_SIDE_EFFECTS = ("assignment_expression", "update_expression", "call_expression")


def _varying(tree: KernelTree) -> set[str]:
    """Locals whose value may differ between the threads of a block: set from a thread index or from
    another such local, or set under a condition on one (thread 0's `if`)."""

    def thread_index(node: Node) -> bool:
        return node.type == "field_expression" and _spelled(tree, node) in THREAD_BUILTINS

    return dependent_locals(tree.body.named_children, (), thread_index)


def _mentions_varying(tree: KernelTree, node: Node, varying: set[str]) -> bool:
    for inner in walk(node):
        if inner.type == "field_expression" and _spelled(tree, inner) in THREAD_BUILTINS:
            return True
        if inner.type == "identifier" and tree.text(inner) in varying:
            return True
    return False


def _shared_names(tree: KernelTree) -> set[str]:
    names: set[str] = set()
    for node in walk(tree.body):
        if node.type == "declaration" and "__shared__" in tree.text(node).split("=")[0]:
            names |= declared_names(node, tree)
    return names


def _applied(tree: KernelTree, start: int, end: int, edits: list[Edit]) -> str:
    """The file's bytes from start to end with the edits inside that range applied."""
    text = tree.data[start:end]
    for begin, stop, new in sorted(edits, key=lambda e: (e[0], e[1]), reverse=True):
        text = text[: begin - start] + new.encode("utf-8") + text[stop - start :]
    return text.decode("utf-8")
