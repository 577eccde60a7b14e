"""A log-step tree over a shared array -> warp shuffles, one slot a warp, then the first warp.

The classic block reduction halves (or doubles) a stride over `__shared__` slots with a barrier every
step (`for (s = 1; s < blockDim.x; s *= 2) { if (tid % (2 * s) == 0) a[tid] += a[tid + s];
__syncthreads(); }`, or `for (s = blockDim.x / 2; s > 0; s >>= 1) if (tid < s) ...`), eight barriers
and a divergent, bank-conflicted step each for 256 threads. Rewritten, each warp combines its 32 slots
in registers with `__shfl_down_sync`, one slot a warp takes the warp's value, and the first warp
combines those: three barriers, none of them inside a loop. Whatever surrounds the loop stays, since
slot 0 holds the block's value afterwards as before (sums, and maxima or minima by the user's function).

Offered where it is safe to drop the other slots' partial values: outside such loops the array is read
only at slot 0, or at a thread's own slot after the thread stored into it again. The loop must run in
every thread of the block (no `if` on the thread index around it, no thread returned before it), the
block one-dimensional, a power of two from 32 to 1024. A sum is reassociated (within the spec's
tolerance); maxima and minima give the same value.
"""

from __future__ import annotations

from cuda_agent.agent.analysis import analysed, assigned_names
from cuda_agent.agent.candidates import Candidate
from cuda_agent.agent.proposers.idioms.block_reduction import log_step_tree
from cuda_agent.agent.proposers.rewrites.shared_loop import thread_zero_names
from cuda_agent.agent.proposers.tree import (
    SUM,
    Edit,
    KernelTree,
    candidate_from,
    identifiers,
    line_indent,
    shared_arrays,
    strip_parens,
    subscript_parts,
    walk,
)
from cuda_agent.agent.targets import KernelTarget
from tree_sitter import Node

PROPOSER = "rewrite:shuffle-tree"
# Element types `__shfl_down_sync` moves in one call.
_SHUFFLED = frozenset(
    {"float", "double", "int", "unsigned", "unsigned int", "long long", "unsigned long long", "long"}
)
_LOOPS = frozenset({"for_statement", "while_statement", "do_statement"})
# Built-in values the same for every thread of a block: a condition made of these and the parameters
# keeps a whole block on the same side.
_BLOCK_UNIFORM = frozenset({"blockIdx", "blockDim", "gridDim"})


def propose(target: KernelTarget) -> list[Candidate]:
    found = analysed(target)
    spec = target.spec
    if found is None or spec is None or len(spec.launch.block) != 1:
        return []
    tree, facts = found
    block = spec.launch.block[0]
    if block < 32 or block > 1024 or block & (block - 1):
        return []
    arrays = {name: kind.replace("volatile", "").strip() for name, kind in shared_arrays(tree).items()}
    threads = frozenset(thread_zero_names(facts) - {"threadIdx.x"})
    trees: list[tuple[Node, str, str]] = []  # (loop, array, kind)
    for node in walk(tree.body):
        if node.type != "for_statement":
            continue
        for array in arrays:
            kind = log_step_tree(node, array, threads, block, tree)
            if kind is not None:
                trees.append((node, array, kind))
                break
    trees = [t for t in trees if arrays[t[1]] in _SHUFFLED and _whole_block(tree, t[0], threads)]
    trees = [
        t for t in trees if _only_slot_zero_after(tree, t[1], [u[0] for u in trees if u[1] == t[1]], threads)
    ]
    if not trees:
        return []
    thread = _thread_name(tree, threads)
    edits: list[Edit] = [
        (loop.start_byte, loop.end_byte, _shuffled(tree, loop, array, arrays[array], kind, thread))
        for loop, array, kind in trees
    ]
    count = "trees" if len(trees) > 1 else "tree"
    return [
        candidate_from(
            target,
            tree.apply_to_file(edits),
            description=f"warp shuffles instead of the log-step {count} over shared memory "
            f"({len(trees)} {'reductions' if len(trees) > 1 else 'reduction'}, 3 barriers each)",
            proposer=PROPOSER,
            assumptions=tuple(
                f"the sum in {array} is reassociated across a warp's lanes"
                for _, array, kind in trees
                if kind == SUM
            ),
        )
    ]


def _is_thread_x(tree: KernelTree, node: Node) -> bool:
    node = strip_parens(node)
    if node.type == "cast_expression" and (value := node.child_by_field_name("value")) is not None:
        node = strip_parens(value)
    return "".join(tree.text(node).split()) == "threadIdx.x"


def _thread_name(tree: KernelTree, threads: frozenset[str]) -> str:
    """The user's name for the thread index where the kernel has one."""
    return min(threads) if threads else "threadIdx.x"


def _whole_block(tree: KernelTree, loop: Node, threads: frozenset[str]) -> bool:
    """Whether every thread of the block reaches the loop: nothing around it but blocks, loops, and `if`s
    on values the same across the block, and no thread returned before it but with its whole block."""
    uniform = _block_uniform(tree)
    for node in walk(tree.body):
        if node.type == "return_statement" and node.start_byte < loop.start_byte:
            guard = node.parent
            while guard is not None and guard.type in ("compound_statement", "expression_statement"):
                guard = guard.parent
            condition = guard.child_by_field_name("condition") if guard is not None else None
            if guard is None or guard.type != "if_statement" or condition is None:
                return False
            if not identifiers(condition) <= uniform or guard.parent != tree.body:
                return False
    node = loop.parent
    while node is not None and node != tree.body:
        if node.type == "if_statement":
            condition = node.child_by_field_name("condition")
            if condition is None or not identifiers(condition) <= uniform:
                return False
        elif node.type not in _LOOPS and node.type not in ("compound_statement", "else_clause"):
            return False
        if node.type in _LOOPS:
            header = [node.child_by_field_name(f) for f in ("condition", "initializer", "update")]
            if any(h is not None and identifiers(h) & (threads | {"threadIdx"}) for h in header):
                return False
        node = node.parent
    return node == tree.body


def _block_uniform(tree: KernelTree) -> set[str]:
    """Names whose value is the same in every thread of a block: the parameters, blockIdx, blockDim,
    gridDim, and locals declared from those alone and never assigned again."""
    uniform = {p.name for p in tree.target.kernel.parameters} | _BLOCK_UNIFORM
    assigned = assigned_names(tree.body)
    for node in walk(tree.body):
        if node.type != "init_declarator":
            continue
        name, value = node.child_by_field_name("declarator"), node.child_by_field_name("value")
        if name is None or name.type != "identifier" or value is None or tree.text(name) in assigned:
            continue
        if identifiers(value) <= uniform:
            uniform.add(tree.text(name))
    return uniform


def _only_slot_zero_after(tree: KernelTree, array: str, loops: list[Node], threads: frozenset[str]) -> bool:
    """Whether the slots other than 0 are never read while they hold the tree's partial values: outside
    the trees, reads are of slot 0 or of the thread's own slot after it stored there again. A loop around
    a tree counts as having just run it when its body starts again."""
    inside = [(loop.start_byte, loop.end_byte) for loop in loops]
    enclosing = [a for a in walk(tree.body) if a.type in _LOOPS and any(_within(loop, a) for loop in loops)]
    inside.sort()
    dirty, passed = False, 0
    entered: set[int] = set()
    for node in walk(tree.body):
        if node.type != "identifier" or tree.text(node) != array:
            continue
        if any(start <= node.start_byte < end for start, end in inside):
            continue
        if any(end <= node.start_byte for _, end in inside[passed:]):
            passed = sum(end <= node.start_byte for _, end in inside)
            dirty = True  # a tree ran since the last access
        if node.parent is not None and node.parent.type in ("array_declarator", "declaration"):
            continue  # its declaration
        for around in enclosing:
            if _within(node, around) and around.start_byte not in entered:
                entered.add(around.start_byte)
                dirty = True  # the next time round, the tree has run
        subscript = node.parent
        parts = subscript_parts(subscript) if subscript is not None else None
        if subscript is None or parts is None or parts[0] != array:
            return False  # `&a[...]`, `a` passed on: not a use this check can follow
        own = _is_own_slot(tree, parts[1], threads)
        assignment = subscript.parent
        stored = (
            assignment is not None
            and assignment.type == "assignment_expression"
            and assignment.child_by_field_name("left") == subscript
        )
        operator = assignment.child_by_field_name("operator") if stored and assignment is not None else None
        if stored and own and operator is not None and operator.type == "=":
            dirty = False  # the thread's own slot holds its new value again
            continue
        if stored and operator is not None and operator.type == "=":
            continue  # a plain store reads nothing
        if dirty and not _is_zero(tree, parts[1]):
            return False  # a read (or `a[i] += v`) of a slot that now holds something else
    return True


def _within(node: Node, around: Node) -> bool:
    return around.start_byte <= node.start_byte and node.end_byte <= around.end_byte


def _is_own_slot(tree: KernelTree, index: Node, threads: frozenset[str]) -> bool:
    index = strip_parens(index)
    return (index.type == "identifier" and tree.text(index) in threads) or _is_thread_x(tree, index)


def _is_zero(tree: KernelTree, index: Node) -> bool:
    return tree.text(strip_parens(index)).rstrip("uUlL") == "0"


def _shuffled(tree: KernelTree, loop: Node, array: str, element: str, kind: str, thread: str) -> str:
    """The shuffle reduction that replaces the tree loop, in the user's names."""
    indent = line_indent(tree, loop)
    unit = tree.indent_unit()
    taken = tree.names()
    value = next(n for n in ("v", "value", "partial", "acc") if n not in taken)
    offset = next(n for n in ("offset", "delta", "lane_step") if n not in taken)
    function = _combining_function(tree, loop)
    if kind == SUM:
        fold = f"{value} += __shfl_down_sync(0xffffffffu, {value}, {offset});"
        first = f"{value} = {thread} < blockDim.x / 32 ? {array}[{thread}] : 0;"
    else:
        fold = f"{value} = {function}({value}, __shfl_down_sync(0xffffffffu, {value}, {offset}));"
        # maxima and minima take a slot twice without harm: the lanes past the warps repeat slot 0
        first = f"{value} = {array}[{thread} < blockDim.x / 32 ? {thread} : 0];"
    warp_loop = f"for (int {offset} = 16; {offset} > 0; {offset} >>= 1) {fold}"
    lines = [
        f"{{  // the block's {kind} by warp shuffles: each warp's in registers, one slot a warp, then warp 0",
        f"{unit}{element} {value} = {array}[{thread}];",
        f"{unit}{warp_loop}",
        f"{unit}__syncthreads();  // every slot read before the first ones are reused",
        f"{unit}if ({thread} % 32 == 0) {array}[{thread} / 32] = {value};",
        f"{unit}__syncthreads();",
        f"{unit}if ({thread} < 32) {{",
        f"{unit * 2}{first}",
        f"{unit * 2}{warp_loop}",
        f"{unit * 2}if ({thread} == 0) {array}[0] = {value};",
        f"{unit}}}",
        f"{unit}__syncthreads();",
        "}",
    ]
    return f"\n{indent}".join(lines)


def _combining_function(tree: KernelTree, loop: Node) -> str:
    """The maximum or minimum function the tree calls (`fmaxf`, `max`)."""
    for node in walk(loop):
        if node.type == "call_expression" and (function := node.child_by_field_name("function")) is not None:
            name = tree.text(function)
            if name not in ("__syncthreads",):
                return name
    return "max"
