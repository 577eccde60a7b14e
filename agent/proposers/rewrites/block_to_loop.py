"""A block that stores one value a thread in shared memory and combines them -> a loop over those values.

The first pass of a course's reduction gives each block's threads one value each (`sdata[tid] = i < n ?
x[i] : 0;`), and after a barrier combines them: thread 0 loops over the array (`for (t = 0; t < 256; ++t)
total += sdata[t];`), or a tree of steps and barriers does, in any of its spellings (agent/analysis/
slot_tree.py runs the steps to find what they compute). Then thread 0 stores the block's result
(`out[blockIdx.x] = sdata[0];`). Each block does little work between its barriers, and a grid of a
quarter million such blocks is limited by how fast blocks start and finish.

Rewritten as what it computes: one thread for each block of the original launch, looping over that
block's threads (`t`): each iteration computes what thread `t` stored (the user's statements, with the
thread's index read as `t`), and folds it in as thread 0 did (the user's loop, with its body first
computing the value), or as the tree did (into an accumulator). Then the thread stores the result as
thread 0 did. No shared memory and no barriers are left. This is a plain loop per output, so
`rewrite:warp-per-output` then splits it across a warp's lanes (neighbouring lanes reading neighbouring
elements) and `rewrite:vector-loop` widens its loads; the search chains them.

Offered where the block is 1-D and the grid 1-D; everything before the first top-level barrier runs the
same for every thread (no early return, no barrier, no warp-level operation, no atomic, no store but
the thread's own slot of the one `__shared__` array, stored on every path); after it there are only the
combining steps (or nothing) and, last, an `if` on thread 0 that reads the array only where the steps
left the whole block's result (or only in its loop over the whole block, one slot an iteration).
"""

from __future__ import annotations

import re
from collections.abc import Callable
from dataclasses import dataclass

from cuda_agent.agent.analysis import KernelFacts, analysed
from cuda_agent.agent.analysis.dependence import dependent_locals
from cuda_agent.agent.analysis.facts import MAX, MIN, SUM, Loop
from cuda_agent.agent.analysis.forms import Form
from cuda_agent.agent.analysis.preprocessor import kernel_definitions
from cuda_agent.agent.analysis.slot_tree import integer_value, run_steps
from cuda_agent.agent.analysis.values import unwrap
from cuda_agent.agent.candidates import Candidate
from cuda_agent.agent.proposers.rewrites._bounds import NotInSizes, in_kernel_terms
from cuda_agent.agent.proposers.rewrites.shared_loop import is_thread_zero, thread_zero_names
from cuda_agent.agent.proposers.tree import (
    KernelTree,
    build_candidate,
    declared_names,
    identifiers,
    is_barrier,
    local_names,
    reindent,
    statements,
    subscript_parts,
    walk,
    writes,
)
from cuda_agent.agent.spec import LaunchSpec
from cuda_agent.agent.targets import KernelTarget
from tree_sitter import Node

PROPOSER = "rewrite:block-to-loop"
THREADS = 256  # a thread for each original block, this many a block (warp-per-output relaunches it)
# What the first phase must not do: each would happen once an iteration of one thread, not once a thread.
_EFFECTS = ("atomic", "__shfl", "__ballot", "__any", "__all", "__syncwarp", "__activemask", "__match")
_EFFECTS += ("__reduce", "__threadfence", "printf", "assert", "cooperative_groups", "warpSize")
# A combine's identity for an accumulator, by element type (the bit patterns of ±infinity: NVRTC has no
# INFINITY). Max and min are idempotent, so the split loops that come next may start them anywhere.
_IDENTITIES = {
    SUM: {"float": "0.0f", "double": "0.0", "int": "0", "unsigned int": "0u", "unsigned": "0u"},
    MAX: {"float": "__int_as_float(0xff800000)", "double": "__longlong_as_double(0xfff0000000000000ULL)"},
    MIN: {"float": "__int_as_float(0x7f800000)", "double": "__longlong_as_double(0x7ff0000000000000ULL)"},
}
_IDENTITIES[MAX] |= {"int": "(-2147483647 - 1)", "unsigned int": "0u", "unsigned": "0u"}
_IDENTITIES[MIN] |= {"int": "2147483647", "unsigned int": "0xffffffffu", "unsigned": "0xffffffffu"}
_FOLDS = {SUM: "{acc} += {value};", MAX: "{acc} = {combiner}({acc}, {value});"}
_FOLDS[MIN] = _FOLDS[MAX]


class _Unsupported(Exception):
    """Not this shape, or not provably the same results; the message says why (for debugging)."""


@dataclass(frozen=True)
class _Shared:
    name: str
    element: str  # its element type as written (`float`)
    declaration: Node


@dataclass(frozen=True)
class _Combine:
    """How the block's values are combined after the barrier."""

    solo: Node  # the `if` on thread 0
    loop: Loop | None  # thread 0's own loop over the slots (None: a tree of steps did it)
    combine: str = SUM  # the tree's, when there is one
    combiner: str = "+"
    result_slot: int = 0  # where the tree left the whole block's result


def propose(target: KernelTarget) -> list[Candidate]:
    found = analysed(target)
    spec = target.spec
    if found is None or spec is None or len(spec.launch.block) != 1 or len(spec.launch.grid) != 1:
        return []
    tree, facts = found
    if not facts.barriers or not facts.uses_shared:
        return []
    try:
        return [_rewrite(tree, facts, spec.launch)]
    except _Unsupported:
        return []


def _rewrite(tree: KernelTree, facts: KernelFacts, launch: LaunchSpec) -> Candidate:
    block = launch.block[0]
    body = list(tree.body.named_children)
    barrier = next((k for k, s in enumerate(body) if is_barrier(s, tree)), None)
    if barrier is None:
        raise _Unsupported("no barrier at the kernel's top level")
    first, after = body[:barrier], body[barrier + 1 :]
    shared = _shared_array(tree, first, block)
    threads = thread_zero_names(facts)
    stores = _slot_stores(tree, first, shared, threads)
    _check_first_phase(tree, first, shared, stores)
    combine = _combine(tree, facts, after, shared, threads, block)
    grid_spec = re.sub(r"\bblock\.x\b", str(block), launch.grid[0])
    try:
        blocks: str | None = in_kernel_terms(tree, grid_spec)
    except NotInSizes as exc:
        # The kernel cannot count the original blocks (`reduce0(const float* in, float* out)`, its grid
        # `n // 256`): the grid stays, each block now one warp doing what the original block did.
        if combine.loop is not None:
            raise _Unsupported(str(exc)) from exc
        blocks = None
    text = _body(tree, first, shared, stores, combine, threads, block, blocks)
    if combine.loop is not None:
        how = "one after another, in thread 0's loop"
    else:
        how = f"one after another and takes their {combine.combine} (the tree of barriers gone)"
    assumptions: tuple[str, ...] = ()
    if combine.loop is None and combine.combine == SUM and shared.element in ("float", "double", "half"):
        assumptions = (
            f"the block's values in {shared.name} are added in order instead of pairwise (rounding differs "
            "within the spec's tolerance)",
        )
    if blocks is None:
        return build_candidate(
            tree,
            body=text,
            launch=LaunchSpec(block=(32,), grid=(grid_spec,)),
            description=(
                f"a warp for each block of {block}: its lanes compute the values the block's threads "
                f"stored in {shared.name} and take their {combine.combine} by warp shuffles"
            ),
            proposer=PROPOSER,
            assumptions=assumptions,
        )
    return build_candidate(
        tree,
        body=text,
        launch=LaunchSpec(block=(THREADS,), grid=(f"ceil_div({grid_spec}, block.x)",)),
        description=(
            f"a thread for each block of {block}: it computes the values the block's threads stored in "
            f"{shared.name} {how}"
        ),
        proposer=PROPOSER,
        assumptions=assumptions,
    )


# -- the first phase: each thread's value ----------------------------------------------------------------


def _shared_array(tree: KernelTree, first: list[Node], block: int) -> _Shared:
    """The kernel's one `__shared__` array, declared in the first phase, at least a slot a thread."""
    found = [
        n
        for n in walk(tree.body)
        if n.type == "declaration" and "__shared__" in {tree.text(c) for c in n.children}
    ]
    if len(found) != 1 or found[0] not in first:
        raise _Unsupported("not one shared array declared before the barrier")
    (declaration,) = found
    declarators = declaration.children_by_field_name("declarator")
    type_node = declaration.child_by_field_name("type")
    if len(declarators) != 1 or declarators[0].type != "array_declarator" or type_node is None:
        raise _Unsupported("the shared array is not one array")
    name = declarators[0].child_by_field_name("declarator")
    size = declarators[0].child_by_field_name("size")
    if name is None or name.type != "identifier":
        raise _Unsupported("the shared array is not one-dimensional")
    if size is not None:
        length = _constant(tree, size)
        if length is None or length < block:
            raise _Unsupported("the shared array has fewer slots than the block has threads")
    elif "extern" not in {tree.text(c) for c in declaration.children}:
        raise _Unsupported("a shared array without a size")
    qualifiers = [tree.text(c) for c in declaration.children if c.type == "type_qualifier"]
    if "volatile" in qualifiers:
        raise _Unsupported("volatile shared memory: warp-synchronous code")
    return _Shared(tree.text(name), tree.text(type_node), declaration)


def _is_shared(tree: KernelTree, declaration: Node) -> bool:
    return "__shared__" in {tree.text(c) for c in declaration.children}


def _slot_stores(tree: KernelTree, first: list[Node], shared: _Shared, threads: set[str]) -> list[Node]:
    """The assignments `a[tid] = value;` of the first phase; every other use of the array refused, and
    every path through the phase must store (else the original reads a slot nothing wrote)."""
    stores = []
    for statement in first:
        if statement == shared.declaration:
            continue
        for node in walk(statement):
            parts = subscript_parts(node) if node.type == "subscript_expression" else None
            if parts is None or parts[0] != shared.name:
                if node.type == "identifier" and tree.text(node) == shared.name and not _subscripted(node):
                    raise _Unsupported("the shared array used other than by subscript")
                continue
            assignment = node.parent
            if (
                assignment is None
                or assignment.type != "assignment_expression"
                or assignment.child_by_field_name("left") != node
                or tree.text(assignment.child_by_field_name("operator") or assignment) != "="
                or "".join(tree.text(parts[1]).split()) not in threads
                or assignment.parent is None
                or assignment.parent.type != "expression_statement"
            ):
                raise _Unsupported("the first phase uses the shared array other than by storing its own slot")
            stores.append(assignment)
    if not any(_always_stores(statement, stores) for statement in first):
        raise _Unsupported("a path through the first phase stores no value")
    return stores


def _subscripted(node: Node) -> bool:
    return node.parent is not None and node.parent.type == "subscript_expression"


def _always_stores(statement: Node, stores: list[Node]) -> bool:
    """Whether running the statement always stores the thread's slot."""
    if statement.type == "expression_statement":
        return any(s.parent == statement for s in stores)
    if statement.type == "compound_statement":
        return any(_always_stores(s, stores) for s in statement.named_children)
    if statement.type == "if_statement":
        taken, alternative = (
            statement.child_by_field_name("consequence"),
            statement.child_by_field_name("alternative"),
        )
        other = (
            alternative.named_children[-1] if alternative is not None and alternative.named_children else None
        )
        return (
            taken is not None
            and other is not None
            and _always_stores(taken, stores)
            and _always_stores(other, stores)
        )
    return False


def _check_first_phase(tree: KernelTree, first: list[Node], shared: _Shared, stores: list[Node]) -> None:
    stored = {s.child_by_field_name("left") for s in stores}
    parameters = {p.name for p in tree.target.kernel.parameters if p.is_pointer}
    for statement in first:
        for node in walk(statement):
            if node.type in ("for_statement", "while_statement", "do_statement", "goto_statement"):
                # a thread's own loop (a grid-stride sum) would become a loop nested in the block's, whose
                # iterations warp-per-output does not split: the block already covers much work
                raise _Unsupported("a loop in the first phase")
            if node.type == "return_statement":
                raise _Unsupported("the first phase leaves early")
            if node.type == "call_expression":
                function = tree.text(node.child_by_field_name("function") or node)
                if function.startswith(_EFFECTS) or function == "__syncthreads":
                    raise _Unsupported(f"{function} in the first phase")
            if node.type in ("identifier", "field_expression") and tree.text(node).startswith(_EFFECTS):
                raise _Unsupported("warp-level code in the first phase")
        for target in writes(statement, tree):
            if target in stored:
                continue
            base = target
            while base.type in ("subscript_expression", "field_expression", "pointer_expression"):
                inner = base.child_by_field_name("argument")
                if inner is None:
                    break
                base = unwrap(inner)
            if base.type != "identifier" or tree.text(base) in parameters or tree.text(base) == shared.name:
                raise _Unsupported("the first phase stores to memory")


# -- after the barrier: how the values are combined --------------------------------------------------------


def _combine(
    tree: KernelTree, facts: KernelFacts, after: list[Node], shared: _Shared, threads: set[str], block: int
) -> _Combine:
    steps = [s for s in after if s.type != "comment"]
    while steps and is_barrier(steps[-1], tree):
        steps.pop()
    if not steps:
        raise _Unsupported("nothing after the barrier")
    solo = steps.pop()
    condition, taken = solo.child_by_field_name("condition"), solo.child_by_field_name("consequence")
    if (
        solo.type != "if_statement"
        or solo.child_by_field_name("alternative") is not None
        or condition is None
        or taken is None
        or not is_thread_zero(tree, condition, threads)
    ):
        raise _Unsupported("the kernel does not end with thread 0's work")
    if any(n.type == "call_expression" and tree.text(n).startswith("atomic") for n in walk(taken)):
        raise _Unsupported("one atomic a block: the block-reduction idiom's case")
    reads = [n for n in walk(taken) if (p := subscript_parts(n)) is not None and p[0] == shared.name]
    if any(n in writes(taken, tree) for n in reads):
        raise _Unsupported("thread 0 stores to the shared array")
    if any(
        n.type == "identifier" and tree.text(n) == shared.name and not _subscripted(n) for n in walk(taken)
    ):
        raise _Unsupported("thread 0 uses the shared array other than by subscript")
    if not steps:
        return _Combine(solo, _own_loop(tree, facts, taken, reads, block))
    constants = kernel_definitions(tree).constants
    aliases = threads - {"threadIdx.x"}
    after_steps = run_steps(steps, shared.name, aliases, block, constants)
    if after_steps is None:
        raise _Unsupported("the steps after the barrier are not a combine the run could follow")
    slots = {_constant(tree, parts[1]) for n in reads if (parts := subscript_parts(n)) is not None}
    if len(slots) != 1 or None in slots:
        raise _Unsupported("thread 0 reads other than one fixed slot")
    (slot,) = slots
    assert slot is not None
    if not 0 <= slot < block or not after_steps[slot].is_whole_block(block):
        raise _Unsupported("the slot thread 0 reads does not hold the whole block's result")
    result = after_steps[slot]
    assert result.combine is not None and result.combiner is not None
    return _Combine(solo, None, result.combine, result.combiner, slot)


def _own_loop(tree: KernelTree, facts: KernelFacts, taken: Node, reads: list[Node], block: int) -> Loop:
    """Thread 0's loop over the whole block (`for (t = 0; t < 256; ++t)`), reading the array only at
    its slot `t`."""
    loops = [
        loop
        for loop in facts.loops
        if taken.start_byte <= loop.node.start_byte < taken.end_byte
        and any(loop.node.start_byte <= r.start_byte < loop.node.end_byte for r in reads)
    ]
    if len(loops) != 1 or not reads:
        raise _Unsupported("not one loop of thread 0 reads the shared array")
    (loop,) = loops
    whole = loop.bound.value() == block or loop.bound == Form.atom("blockDim.x")
    if loop.start.value() != 0 or loop.step.value() != 1 or not whole:
        raise _Unsupported("thread 0's loop does not cover the block's slots once each")
    for read in reads:
        parts = subscript_parts(read)
        inner = [o for o in facts.loops if o.node.start_byte < read.start_byte < o.node.end_byte]
        if parts is None or tree.text(unwrap(parts[1])) != loop.variable or inner[-1] is not loop:
            raise _Unsupported("thread 0 reads the shared array other than at its loop's slot")
    if loop.variable in writes_names(tree, loop.body):
        raise _Unsupported("thread 0's loop changes its counter")
    return loop


def writes_names(tree: KernelTree, node: Node) -> set[str]:
    return {tree.text(t) for t in writes(node, tree) if t.type == "identifier"}


# -- the rewritten body -------------------------------------------------------------------------------------


def _body(
    tree: KernelTree,
    first: list[Node],
    shared: _Shared,
    stores: list[Node],
    combine: _Combine,
    threads: set[str],
    block: int,
    blocks: str | None,
) -> str:
    """The rewritten body: a thread for each original block, or with `blocks` None (the kernel cannot
    count them) a warp for each, the grid unchanged."""
    names = local_names(tree, "block", "t", "slot", f"block_{combine.combine}", "offset")
    taken = combine.solo.child_by_field_name("consequence")
    assert taken is not None
    solo_statements = statements(taken) if taken.type == "compound_statement" else [taken]
    phase = [s for s in first if s != shared.declaration]
    varying = _varying(tree, phase, threads)
    declared = {name for s in phase for name in declared_names(s, tree)}
    used_by_solo = {name for s in solo_statements for name in identifiers(s)}
    if (used_by_solo & varying) - threads:
        raise _Unsupported("thread 0 uses a value another thread computed")
    uniform = [s for s in phase if s.type == "declaration" and not (declared_names(s, tree) & varying)]
    per_thread = [s for s in phase if s not in uniform]
    thread = names["t"] if combine.loop is None else combine.loop.variable
    # a local of the first phase named like one of thread 0's gets a fresh name inside the loop
    clashing = (declared - {s for u in uniform for s in declared_names(u, tree)}) & (used_by_solo | {thread})
    renames = dict(zip(sorted(clashing), _fresh(tree, sorted(clashing)), strict=True))
    unit = tree.indent_unit()
    common = {
        "blockIdx.x": names["block"],
        "blockDim.x": str(block),
        "gridDim.x": f"({blocks or 'gridDim.x'})",
    }

    def as_written(node: Node, replacements: dict[str, str], slot_value: str | None = None) -> str:
        def substitute(child: Node) -> str | None:
            written = "".join(tree.text(child).split())
            if child.type == "field_expression" and written in replacements:
                return replacements[written]
            if child.type == "identifier" and tree.text(child) in replacements:
                return replacements[tree.text(child)]
            if child in stores and (value := child.child_by_field_name("right")) is not None:
                declared = f"{shared.element} " if child == declaring else ""
                return f"{declared}{names['slot']} = {as_written(value, replacements)}"
            parts = subscript_parts(child) if child.type == "subscript_expression" else None
            if parts is not None and parts[0] == shared.name and slot_value is not None:
                return slot_value
            return None

        return tree.substituted(node, substitute)

    # `float slot = value;` where one statement of the phase itself stores the slot, else declared first
    top = [s for s in stores if s.parent in per_thread]
    declaring = top[0] if len(stores) == 1 and top else None
    in_loop = {**common, "threadIdx.x": thread, **renames}
    # the phase's statements go into a loop: the new one (two levels in), or thread 0's (one below it)
    loop_node = combine.loop.node if combine.loop is not None else None
    inner_indent = unit * 2 if loop_node is None else tree.indent_at(loop_node.start_byte) + unit
    lines = [] if declaring is not None else [f"{shared.element} {names['slot']};"]
    lines += [reindent(as_written(s, in_loop), tree.indent_at(s.start_byte), "") for s in per_thread]
    value_lines = "\n".join(reindent(line, "", inner_indent) for line in lines)
    zero = {**common, **{name: "0" for name in threads if name != "threadIdx.x"}, "threadIdx.x": "0"}
    if blocks is None:
        out = [
            "{",
            f"{unit}// A warp for each block of the original launch ({block} threads a block): its lanes",
            f"{unit}// compute the values that block's threads stored in {shared.name}, then combine them.",
            f"{unit}int {names['block']} = blockIdx.x;",
        ]
    else:
        out = [
            "{",
            f"{unit}// A thread for each block of the original launch ({block} threads a block): it computes",
            f"{unit}// the values that block's threads stored in {shared.name} one after another, and",
            f"{unit}// combines them as the block did.",
            f"{unit}int {names['block']} = blockIdx.x * blockDim.x + threadIdx.x;",
            f"{unit}if ({names['block']} >= {blocks}) return;",
        ]
    out += [reindent(as_written(s, common), tree.indent_at(s.start_byte), unit) for s in uniform]
    if combine.loop is None:
        acc = names[f"block_{combine.combine}"]
        identity = _IDENTITIES[combine.combine].get(shared.element)
        if identity is None:
            raise _Unsupported(f"no identity of {combine.combine} for {shared.element}")
        fold = _FOLDS[combine.combine].format(acc=acc, combiner=combine.combiner, value=names["slot"])
        # (a warp a block: blockDim.x is 32, the lanes stepping past each other)
        start, step = ("threadIdx.x", f"{thread} += blockDim.x") if blocks is None else ("0", f"++{thread}")
        out += [
            f"{unit}{shared.element} {acc} = {identity};",
            f"{unit}for (int {thread} = {start}; {thread} < {block}; {step}) {{",
            value_lines,
            f"{unit}{unit}{fold}",
            f"{unit}}}",
        ]
        if blocks is None:
            offset = names["offset"]
            shuffled = f"__shfl_down_sync(0xffffffffu, {acc}, {offset})"
            combined = _FOLDS[combine.combine].format(acc=acc, combiner=combine.combiner, value=shuffled)
            out += [
                f"{unit}for (int {offset} = 16; {offset} > 0; {offset} >>= 1) {combined}",
                f"{unit}if (threadIdx.x != 0) return;  // lane 0 holds the block's {combine.combine}",
            ]
        solo_text = [as_written(s, zero, slot_value=acc) for s in solo_statements]
    else:
        loop = combine.loop
        solo_text = [
            _with_values(tree, s, loop, value_lines, lambda n: as_written(n, zero, slot_value=names["slot"]))
            if s.start_byte <= loop.node.start_byte < s.end_byte
            else as_written(s, zero)
            for s in solo_statements
        ]
    out += [
        reindent(t, tree.indent_at(s.start_byte), unit)
        for t, s in zip(solo_text, solo_statements, strict=True)
    ]
    out.append("}")
    return "\n".join(out)


def _with_values(
    tree: KernelTree, statement: Node, loop: Loop, value_lines: str, written: Callable[[Node], str]
) -> str:
    """Thread 0's statement as `written`, its loop's body first computing the value of slot `t`."""
    body = loop.body
    whole, marker = written(statement), written(body)
    if body.type == "compound_statement":
        opened = marker.index("{") + 1
        replaced = marker[:opened] + "\n" + value_lines + marker[opened:]
    else:
        indent = tree.indent_at(body.start_byte)
        replaced = (
            "{\n"
            + value_lines
            + "\n"
            + indent
            + marker.strip()
            + "\n"
            + indent[: -len(tree.indent_unit())]
            + "}"
        )
    if marker not in whole:
        raise _Unsupported("thread 0's loop body could not be placed")
    return whole.replace(marker, replaced, 1)


def _depth_in(node: Node, top: Node) -> int:
    depth, parent = 0, node.parent
    while parent is not None and parent != top:
        if parent.type == "compound_statement":
            depth += 1
        parent = parent.parent
    return depth


def _varying(tree: KernelTree, phase: list[Node], threads: set[str]) -> set[str]:
    """The first phase's locals whose values may differ between the block's threads: those that depend
    on the thread's index, or on a load or a call (kept in the loop: they are not moved out of it)."""

    def differs(node: Node) -> bool:
        if node.type == "field_expression":
            return tree.text(node).replace(" ", "").startswith("threadIdx")
        return node.type in ("subscript_expression", "pointer_expression", "call_expression")

    return dependent_locals(phase, threads, differs)


def _fresh(tree: KernelTree, wanted: list[str]) -> list[str]:
    return list(local_names(tree, *(f"{w}_t" for w in wanted)).values())


# -- numbers and the grid ------------------------------------------------------------------------------------


def _constant(tree: KernelTree, node: Node) -> int | None:
    """An integer literal or a numeric `#define` (also in simple arithmetic)."""
    return integer_value(unwrap(node), kernel_definitions(tree).constants)
