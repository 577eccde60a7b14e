"""A thread per element along x -> a loop over the grid's x extent, a few elements a thread.

Element-wise kernels over rows are written with the column along x and the row along another axis
(`n = blockIdx.y; c = blockIdx.x * blockDim.x + threadIdx.x`, a PyTorch extension's LSTM cell), and they
read each array at an offset that moves with the column by one element (`gates[(n * 3 + g) * state +
c]`, an accessor's row of a 3-D tensor). One element a thread keeps few loads in flight; the syntactic
vectorisers (`vectorize`, `vectorize-rows`) take only `p[i]` and `p[row * cols + col]`.

Driven by the analysis: the kernel's global index along x, declared alone at its top level and never
assigned, and its bounds check on it in any spelling the analysis normalises (`if (c < n) { ... }` last,
or `if (row >= M || c >= N) return;` then the work). Rewritten as a loop over the grid's x extent,

    for (int c = <the index>; c < <its bound>; c += blockDim.x * gridDim.x) { <the rest, as written> }

with the check's `return` read as `continue`, and the grid along x W times smaller (W = 16 bytes over the
widest element the kernel touches): each thread runs W elements' work in turn, neighbouring threads at
neighbouring elements at every step. A thread doing other threads' work one after another is one of the
orders the threads could have run in, so every element is computed as before wherever the work reads no
thread identity, waits at no barrier, uses no shared memory or warp-level operation, returns only through
the check and changes nothing declared before the loop; those are the conditions. Offered for
element-wise work (no loop in it) whose accesses are the thread's element or one every thread of the row
shares. Alone it is thread coarsening; its use is the follow-up, `rewrite:vector-loop`, which makes each
thread's step one 16-byte vector an array (the analysis places any access whose offset moves with the
index by one element).
"""

from __future__ import annotations

from cuda_agent.agent.analysis import KernelFacts, analysed, assigned_names
from cuda_agent.agent.analysis.facts import Guard, ThreadIndex
from cuda_agent.agent.analysis.forms import THREAD_ATOMS, Form
from cuda_agent.agent.candidates import Candidate
from cuda_agent.agent.proposers.rewrites._one_thread import (
    Unsupported,
    check_statements,
    declared_once,
    pure,
    pure_declaration,
)
from cuda_agent.agent.proposers.transforms.grid_stride import coarsened_grid
from cuda_agent.agent.proposers.tree import (
    KernelTree,
    build_candidate,
    declared_names,
    identifiers,
    identifiers_in,
    line_indent,
    operands,
    reindent,
    single_declaration,
)
from cuda_agent.agent.spec import LaunchSpec
from cuda_agent.agent.targets import KernelTarget
from tree_sitter import Node

PROPOSER = "rewrite:stride-loop"
VECTOR_BYTES = 16  # what a thread's elements add up to: one 16-byte vector an array for vector-loop
_X_ATOMS = frozenset({"threadIdx.x", "blockIdx.x", "blockDim.x", "gridDim.x"})


def propose(target: KernelTarget) -> list[Candidate]:
    found = analysed(target)
    spec = target.spec
    if found is None or spec is None or not spec.launch.grid:
        return []
    tree, facts = found
    try:
        return [_rewrite(tree, facts, spec.launch)]
    except Unsupported:
        return []


def _rewrite(tree: KernelTree, facts: KernelFacts, launch: LaunchSpec) -> Candidate:
    if facts.uses_shared or facts.barriers:
        raise Unsupported("shared memory or a barrier")
    index = _x_index(tree, facts, launch.block[0])
    guard = facts.guard
    bound = guard.bound_of(index.name) if guard is not None else None
    if guard is None or bound is None or guard.statement.parent != tree.body:
        raise Unsupported("no bounds check on the index at the kernel's top level")
    body = list(tree.body.named_children)
    if body.index(guard.statement) < body.index(index.declaration):
        raise Unsupported("the bounds check comes before the index")
    looped = body[body.index(index.declaration) + 1 :]
    middle = looped[: looped.index(guard.statement)]
    after = [n for n in looped[looped.index(guard.statement) + 1 :] if n.type != "comment"]
    # Fewer threads now run what is outside the work: it must be nothing but names for values.
    before = body[: body.index(index.declaration)]
    if any(n.type != "comment" and not pure_declaration(tree, n) for n in before + middle):
        raise Unsupported("statements with effects outside the bounds check's work")
    if guard.statement.child_by_field_name("alternative") is not None:
        raise Unsupported("an else: threads past the bound do work too")
    if after and not guard.early_return:
        raise Unsupported("statements after the guarded block")
    if identifiers_in(tree, bound.bound_text) & (_declared(tree, middle) | {index.name}):
        raise Unsupported("the bound is computed after the index")
    _check_work(tree, facts, index, guard, looped, before)
    staying, moved = _apart(tree, middle, index.name)
    rest = _conditions(tree, guard, index.name, moved)
    if facts.loops:  # vector-loop widens a loop without loops inside; a thread's own loop stays scalar
        raise Unsupported("a loop in the work")
    for access in facts.accesses:  # what vector-loop takes: the same element, or the next one
        if access.lane_stride not in (0, 1) or access.hidden & _X_ATOMS:
            raise Unsupported(f"{access.array} is not read at neighbouring elements by neighbouring threads")
    widest = max((a.element_bytes or 0 for a in facts.accesses), default=0)
    width = VECTOR_BYTES // widest if widest else 0
    if width < 2:
        raise Unsupported("no array elements narrower than a vector")
    if len(launch.grid) == 1 and index.direct and all(a.offset == index.form for a in facts.accesses):
        raise Unsupported("`p[i]` alone: vectorize's")
    text = _body(tree, index, guard, bound.bound_text, rest, staying, moved)
    grid = (coarsened_grid(launch.grid[0], width), *launch.grid[1:])
    return build_candidate(
        tree,
        body=text,
        launch=LaunchSpec(block=launch.block, grid=grid, shared_bytes=launch.shared_bytes),
        description=(
            f"{index.name} a loop over the grid's x extent, {width} elements a thread one grid stride "
            f"apart (the grid along x {width} times smaller)"
        ),
        proposer=PROPOSER,
    )


def _x_index(tree: KernelTree, facts: KernelFacts, block_x: int) -> ThreadIndex:
    """The index the bounds check bounds that is the global x index, or it shifted by values the same
    for every thread (`k = i + offset; if (k < n)`)."""
    bounded = {b.index for b in facts.guard.bounds} if facts.guard is not None else set()
    # `blockIdx.x * 16 + threadIdx.x` under a block of 16 is the global index too (the kernel assumes it)
    spelled = Form.atom("blockIdx.x") * Form.constant(block_x) + Form.atom("threadIdx.x")
    global_x = Form.atom("blockIdx.x") * Form.atom("blockDim.x") + Form.atom("threadIdx.x")
    along_x = [
        i
        for i in facts.indices
        if i.name in bounded
        and any(
            not (i.form - x).atoms() & THREAD_ATOMS and "⟨" not in (i.form - x).text()
            for x in (spelled, global_x)
        )
    ]
    if len(along_x) != 1:
        raise Unsupported("not one bounded global index along x")
    return declared_once(tree, along_x[0])


def _declared(tree: KernelTree, statements: list[Node]) -> set[str]:
    return set().union(*(declared_names(s, tree) for s in statements)) if statements else set()


def _check_work(
    tree: KernelTree,
    facts: KernelFacts,
    index: ThreadIndex,
    guard: Guard,
    looped: list[Node],
    before: list[Node],
) -> None:
    start, end = looped[0].start_byte, looped[-1].end_byte
    others = [i for i in facts.indices if i is not index]
    for use in facts.thread_uses:
        if start <= use.start_byte < end and tree.text(use) in _X_ATOMS:
            raise Unsupported("the work reads the thread's place along x")
    read = set().union(*(identifiers(s) for s in looped))
    for other in others:  # another index along x (`int j = threadIdx.x;`): it does not move with the loop
        if not other.form.atoms() & _X_ATOMS:
            continue
        follows = start <= other.declaration.start_byte < end and not other.direct  # through the loop's
        if not follows and (other.name in read or start <= other.declaration.start_byte < end):
            raise Unsupported(f"{other.name} reads the thread's place along x")
    outside = _declared(tree, before) | {p.name for p in tree.target.kernel.parameters}
    for statement in looped:
        if assigned_names(statement) & outside:
            raise Unsupported("the work changes a value declared before the loop")
    check_statements(tree, looped, lambda node: _the_checks_return(node, guard))
    if any(a in THREAD_ATOMS for a in index.form.atoms() - _X_ATOMS):
        raise Unsupported("the index reads other axes too")


def _apart(tree: KernelTree, middle: list[Node], index: str) -> tuple[list[Node], list[Node]]:
    """The declarations between the index and its check that stay before the loop (they read neither the
    index nor a local that does: `int base = row * N;`), and those that move into it."""
    moving = {index}
    staying, moved = [], []
    for node in middle:
        if node.type == "comment" or not identifiers(node) & moving:
            staying.append(node)
        else:
            moved.append(node)
            moving |= declared_names(node, tree)
    while staying and staying[-1].type == "comment" and moved:  # a comment above a moved statement
        moved.insert(0, staying.pop())
    return staying, sorted(moved, key=lambda n: n.start_byte)


def _the_checks_return(node: Node, guard: Guard) -> bool:
    return guard.early_return and guard.statement.start_byte <= node.start_byte < guard.statement.end_byte


def _conditions(tree: KernelTree, guard: Guard, index: str, middle: list[Node]) -> list[str]:
    """The check's other conjuncts (`row < M` of `row < M && c < N`; `row >= M` of an early return's
    `row >= M || c >= N`), to test once before the loop: they may not read the index or the locals the
    loop now declares."""
    condition = guard.statement.child_by_field_name("condition")
    assert condition is not None
    if condition.type == "condition_clause" and condition.named_children:
        condition = condition.named_children[-1]
    parts = operands(condition, "||" if guard.early_return else "&&")
    own = [p for p in parts if index in identifiers(p)]
    if len(own) != 1:
        raise Unsupported("the index's bound is not one conjunct of the check")
    rest = [p for p in parts if p not in own]
    if any(identifiers(p) & _declared(tree, middle) for p in rest):
        raise Unsupported("the check reads a local declared after the index")
    if not all(pure(tree, p) for p in rest):  # tested once a thread now, and by fewer threads
        raise Unsupported("the check has effects")
    return [tree.text(p) for p in rest]


def _body(
    tree: KernelTree,
    index: ThreadIndex,
    guard: Guard,
    bound: str,
    rest: list[str],
    staying: list[Node],
    middle: list[Node],
) -> str:
    """The kernel's body with the index's declaration and bounds check made the loop, the declarations
    that do not read the index before it."""
    declared = single_declaration(index.declaration, tree)
    assert declared is not None and declared[2] is not None
    kind, name, initializer = declared
    indent = line_indent(tree, index.declaration)
    unit = tree.indent_unit()
    pieces = [_lines(tree, middle, indent, indent + unit)] if middle else []
    if guard.early_return:
        work = [n for n in tree.body.named_children if n.start_byte >= guard.statement.end_byte]
        work_indent, end = indent, tree.body.named_children[-1].end_byte
    else:
        consequence = guard.statement.child_by_field_name("consequence")
        assert consequence is not None
        compound = consequence.type == "compound_statement"
        work = list(consequence.named_children) if compound else [consequence]
        work_indent = line_indent(tree, work[0]) if work and tree.starts_line(work[0]) else indent + unit
        end = guard.statement.end_byte
    if work:
        pieces.append(reindent(_span_text(tree, work), work_indent, indent + unit))
    step = f"{name} += blockDim.x * gridDim.x"
    head = f"for ({kind} {name} = {tree.text(initializer)}; {name} < {_grouped(bound)}; {step}) {{\n"
    loop = head + "\n".join(pieces) + f"\n{indent}}}"
    if rest and guard.early_return:  # the rest of the check ends the thread before the loop, as it did
        loop = f"if ({' || '.join(rest)}) return;\n{indent}{loop}"
    elif rest:
        loop = f"if ({' && '.join(rest)}) {{\n{reindent(loop, indent, indent + unit)}\n{indent}}}"
    if staying:
        loop = f"{_lines(tree, staying, indent, indent)[len(indent) :]}\n{indent}{loop}"
    before = tree.data[tree.body.start_byte : index.declaration.start_byte].decode()
    after = tree.data[end : tree.body.end_byte].decode()
    return before + loop + after


def _span_text(tree: KernelTree, nodes: list[Node]) -> str:
    return tree.data[nodes[0].start_byte : nodes[-1].end_byte].decode()


def _lines(tree: KernelTree, nodes: list[Node], old: str, new: str) -> str:
    """Statements one after another (not necessarily neighbours in the file), each moved to `new`."""
    return "\n".join(reindent(tree.text(n), old, new) for n in nodes)


def _grouped(bound: str) -> str:
    return bound if bound.replace("_", "").replace(".", "").isalnum() else f"({bound})"
