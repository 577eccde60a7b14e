"""A block whose threads each do one element's work -> a block F times smaller, each thread doing F's.

Course kernels give every thread of a fixed-size block one element (`squares[tid] = x[i] * x[i];`, then
a barrier, then the block's sum). Such a thread has one load in flight; at full occupancy that is 8 KiB
an SM, too little to cover the memory's latency (the H200 needs about three times that). Here each
thread stands for F threads of the original block: the code between two barriers (a phase) runs in an
unrolled loop over them, `threadIdx.x` read as the one it stands for and `blockDim.x` as the original
block's size, so the F loads of a phase are in flight together and every block still covers what it
did. A phase only thread 0 runs (`if (tid == 0) { ... }`) runs once. The block's `__shared__` arrays
are declared once, before the phases.

Offered where every barrier is a statement of the kernel's body (not under a branch or a loop), the
block is 1-D, nothing works a warp at a time (shuffles, votes, `__syncwarp`, `volatile` shared
memory), the only `return`s are in the last phase outside loops (each becomes a `continue`), and a
local that a later phase reads is the thread's position (declared again there).
"""

from __future__ import annotations

from dataclasses import replace

from cuda_agent.agent.analysis import KernelFacts, analysed, assigned_names
from cuda_agent.agent.analysis.values import text
from cuda_agent.agent.candidates import Candidate
from cuda_agent.agent.proposers.rewrites.shared_loop import is_thread_zero, thread_zero_names
from cuda_agent.agent.proposers.tree import (
    KernelTree,
    build_candidate,
    declared_names,
    fresh_names,
    inside_loop,
    is_barrier,
    reindent,
    walk,
    walk_with_comments,
)
from cuda_agent.agent.targets import KernelTarget
from tree_sitter import Node

PROPOSER = "rewrite:block-coarsen"
FACTORS = (4, 2)  # original threads a thread stands for
# What works a warp (or the whole block) at a time: its lanes would no longer be the original threads.
_WARP_WIDE = ("__shfl", "__ballot", "__any", "__all", "__syncwarp", "__activemask", "__match", "__reduce")
_WARP_WIDE += (
    "__syncthreads_count",
    "__syncthreads_and",
    "__syncthreads_or",
    "warpSize",
    "cooperative_groups",
)
_OTHER_AXES = ("threadIdx.y", "threadIdx.z", "blockDim.y", "blockDim.z")


class _Unsupported(Exception):
    """The kernel's threads cannot be merged this way; the message says why (for debugging)."""


def propose(target: KernelTarget) -> list[Candidate]:
    found = analysed(target)
    if found is None or target.spec is None or len(target.spec.launch.block) != 1:
        return []
    tree, facts = found
    try:
        phases, shared = _phases(tree)
    except _Unsupported:
        return []
    if len(phases) < 2:
        return []  # no barrier: the grid-stride and vector transforms take a kernel without one
    (block,) = target.spec.launch.block
    candidates = []
    for factor in FACTORS:
        if block % (32 * factor):
            continue
        try:
            body = _body(tree, facts, phases, shared, factor)
        except _Unsupported:
            return []
        launch = target.spec.launch
        grid = tuple(_virtual_block(g, factor) for g in launch.grid)
        shared_bytes = _virtual_block(launch.shared_bytes, factor)  # dynamic shared memory: the block's
        # the launch is written into the file's spec and launches by optimize's wrapper, as for every
        # rewrite (candidate_from would write an inferred spec out a second time)
        candidates.append(
            build_candidate(
                tree,
                body=body,
                description=f"block {block // factor}, each thread doing the work of {factor} of the "
                f"original {block}: {factor} loads in flight a thread",
                proposer=PROPOSER,
                launch=replace(launch, block=(block // factor,), grid=grid, shared_bytes=shared_bytes),
            )
        )
    return candidates


def _phases(tree: KernelTree) -> tuple[list[list[Node]], list[Node]]:
    """The body's statements between top-level barriers, and its `__shared__` declarations."""
    for node in walk_with_comments(tree.body):
        written = tree.text(node)
        if node.type == "identifier" and written.startswith(_WARP_WIDE):
            raise _Unsupported(f"{written} works a warp at a time")
        if node.type == "type_qualifier" and written == "volatile":
            raise _Unsupported("volatile memory: warp-synchronous code")
        if node.type == "field_expression" and "".join(written.split()) in _OTHER_AXES:
            raise _Unsupported("a block of more than one dimension")
    phases: list[list[Node]] = [[]]
    shared = []
    for statement in tree.body.named_children:  # comments kept where they are
        if is_barrier(statement, tree):
            phases.append([])
        elif statement.type == "declaration" and "__shared__" in tree.text(statement).split():
            shared.append(statement)
        else:
            if any(is_barrier(n, tree) for n in walk(statement) if n.type == "expression_statement"):
                raise _Unsupported("a barrier under a branch or a loop")
            phases[-1].append(statement)
    return [p for p in phases if p], shared


def _body(
    tree: KernelTree, facts: KernelFacts, phases: list[list[Node]], shared: list[Node], factor: int
) -> str:
    unit = tree.indent_unit()
    taken = tree.names()
    virtual, e = fresh_names(taken, "vthread", "e")
    positions = _positions(tree, facts)
    zero = thread_zero_names(facts)
    lines = [tree.text(s) for s in shared]
    lines.append(f"// each thread stands for {factor} of the original block's threads, one a step")
    declared: list[Node] = []  # top-level declarations of the phases so far
    for number, phase in enumerate(phases):
        if number:
            lines.append("__syncthreads();")
        last = number == len(phases) - 1
        needed = _carried(tree, phase, declared, positions)
        if _thread_zero_only(tree, phase, zero, positions):
            # threadIdx.x == 0 holds for the first thread a step stands for alone: run it once for that one
            lines += [_rewritten(tree, s, "threadIdx.x", factor, last) for s in (*needed, *phase)]
        else:
            lines.append("#pragma unroll")
            lines.append(f"for (int {e} = 0; {e} < {factor}; ++{e}) {{")
            lines.append(f"{unit}const unsigned int {virtual} = threadIdx.x + {e} * blockDim.x;")
            for statement in (*needed, *phase):
                written = _rewritten(tree, statement, virtual, factor, last)
                lines += [unit + line for line in written.split("\n")]
            lines.append("}")
        declared += [s for s in phase if s.type == "declaration"]
    return "{\n" + "\n".join(unit + line if line else "" for line in "\n".join(lines).split("\n")) + "\n}"


def _positions(tree: KernelTree, facts: KernelFacts) -> set[str]:
    """Locals that only name the thread's position (`int i = blockIdx.x * THREADS + threadIdx.x;`), which a
    later phase may declare again instead of carrying them."""
    mutable = assigned_names(tree.body)
    return {
        i.name
        for i in facts.indices
        if i.name not in mutable
        and not any(n.type in ("subscript_expression", "call_expression") for n in walk(i.declaration))
    }


def _carried(tree: KernelTree, phase: list[Node], declared: list[Node], positions: set[str]) -> list[Node]:
    """The earlier phases' declarations this phase reads: positions to declare again, in their order. A
    position made from another (`int i = base + tid;`) brings that one's declaration too, so the latest
    are looked at first."""
    read = {text(n) for s in phase for n in walk(s) if n.type == "identifier"}
    needed = []
    for declaration in reversed(declared):
        own = declared_names(declaration, tree)
        if not own & read:
            continue
        if not own <= positions:
            raise _Unsupported(f"{', '.join(sorted(own & read))} carries a value across a barrier")
        needed.append(declaration)
        read |= {text(n) for n in walk(declaration) if n.type == "identifier"}
    return needed[::-1]


def _thread_zero_only(tree: KernelTree, phase: list[Node], zero: set[str], positions: set[str]) -> bool:
    """Whether the phase is position declarations and one `if (tid == 0) { ... }` without an else."""
    work = [
        s
        for s in phase
        if s.type != "comment" and not (s.type == "declaration" and declared_names(s, tree) <= positions)
    ]
    if len(work) != 1 or work[0].type != "if_statement" or work[0].child_by_field_name("alternative"):
        return False
    condition = work[0].child_by_field_name("condition")
    return condition is not None and is_thread_zero(tree, condition, zero)


def _rewritten(tree: KernelTree, statement: Node, thread: str, factor: int, last: bool) -> str:
    """The statement with the thread's index and the block's size those of the thread it stands for, a
    `return` of the last phase as going on to the next one."""

    def substitute(node: Node) -> str | None:
        written = "".join(tree.text(node).split())
        if node.type == "field_expression" and written == "threadIdx.x":
            return thread
        if node.type == "field_expression" and written == "blockDim.x":
            return f"(blockDim.x * {factor})"
        if node.type == "return_statement":
            if not last or inside_loop(node, statement):
                raise _Unsupported("a return before a barrier, or inside a loop")
            return "continue;" if thread != "threadIdx.x" else "return;"
        return None

    return reindent(tree.substituted(statement, substitute), tree.indent_at(statement.start_byte), "")


def _virtual_block(expression: str, factor: int) -> str:
    """A launch expression (grid, dynamic shared bytes) with the block read as the original block's size."""
    return expression.replace("block.x", f"(block.x * {factor})")
