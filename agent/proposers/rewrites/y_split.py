"""A thread per output walking a long loop that neighbouring threads already read together -> the loop
split across threads along y, the partial results merged through shared memory.

Driven by the analysis: one global index along x bounded by the check, one loop whose iterations are
independent with reductions of a known combine, and every access in it either the same for all threads
(a vector) or one element apart between neighbouring threads (a column walk: `A[row * n + col]`,
`x[i * cols + j]`). Such a kernel is coalesced but has only as many threads as outputs, each with the
whole loop to itself (y = Aᵀx over 4096 columns: 4096 threads). Here a block holds 32 (or 16) outputs
along x and 8, 32 or 64 threads along y; each takes every 8th (32nd, 64th) iteration, and thread y = 0
merges the partial results in order and runs the statements after the loop. The bounds check becomes
a flag, so every thread of a block reaches the barrier.
"""

from __future__ import annotations

from cuda_agent.agent.analysis import KernelFacts, analysed, declared_values
from cuda_agent.agent.analysis.facts import FIND_FIRST, Loop
from cuda_agent.agent.analysis.forms import Form
from cuda_agent.agent.analysis.values import text, unwrap
from cuda_agent.agent.candidates import Candidate
from cuda_agent.agent.proposers.rewrites._bounds import NotInSizes, bound_terms
from cuda_agent.agent.proposers.rewrites._combine import (
    Unsupported,
    check_initial,
    declared_type,
    merge,
    strided,
)
from cuda_agent.agent.proposers.tree import (
    KernelTree,
    build_candidate,
    inside_loop,
    local_names,
    reads_axes,
    reindent,
    walk,
)
from cuda_agent.agent.spec import LaunchSpec
from cuda_agent.agent.targets import KernelTarget
from tree_sitter import Node

PROPOSER = "rewrite:y-split"
# (outputs a block along x, threads along y sharing each output's loop): blocks of 256 and 1024 threads
# whose warps read 128 contiguous bytes; and 16 outputs a block (a warp reads two 64-byte pieces) for
# outputs so few that blocks of 32 would leave SMs idle (4096 columns: 128 blocks for 132 SMs).
SHAPES = ((32, 8), (32, 32), (16, 64))
# Iterations a thread runs at once, their loads issued together: with the step blockDim.y unknown to the
# compiler, the plain split loop has one load in flight a thread (y = Aᵀx at 16x64: 0.129 ms plain,
# 0.084 ms with 4 at once, on the H200).
UNROLL = 4


def propose(target: KernelTarget) -> list[Candidate]:
    found = analysed(target)
    if found is None or target.spec is None:
        return []
    tree, facts = found
    try:
        outputs, loop = _recognise(tree, facts)
        return [
            build_candidate(
                tree,
                body=_body(tree, facts, loop, width, height),
                launch=LaunchSpec(block=(width, height), grid=(f"ceil_div({outputs}, {width})", "1")),
                description=f"{width} outputs a block, the loop over {loop.variable} split across {height} "
                "threads along y, partial results merged through shared memory",
                proposer=PROPOSER,
                assumptions=_assumptions(tree, loop),
            )
            for width, height in SHAPES
        ]
    except Unsupported:
        return []


def _recognise(tree: KernelTree, facts: KernelFacts) -> tuple[str, Loop]:
    guard = facts.guard
    launch = tree.target.spec.launch if tree.target.spec else None
    if guard is None or launch is None:
        raise Unsupported("no bounds check")
    if any(b != 1 for b in launch.block[1:]) and reads_axes(tree, "yz"):
        raise Unsupported("not a 1-D launch")  # a 2-D block whose y the kernel never reads only repeats
    if facts.uses_shared or facts.barriers or facts.atomics or facts.thread_uses or facts.unmodelled:
        raise Unsupported("shared memory, barriers, atomics or builtins in the body")
    mapped = [i for i in facts.indices if i.direct]
    if len(mapped) != 1 or mapped[0].axis != "x" or guard.bound_of(mapped[0].name) is None:
        raise Unsupported("not one bounded global index along x")
    loops = [loop for loop in facts.loops if loop.depth == 0]
    if len(loops) != 1 or len(facts.loops) != 1:
        raise Unsupported("not exactly one loop")
    (loop,) = loops
    if not loop.independent or not loop.reductions or loop.step.value() != 1:
        raise Unsupported("not a reduction loop with independent unit steps")
    if any(r.combine == FIND_FIRST for r in loop.reductions):
        raise Unsupported("a search, whose lanes stop at their own finds")
    inside = facts.accesses_in(loop)
    if any(a.write for a in inside):
        raise Unsupported("the loop stores")
    # a flat index's pieces (`c = idx % C`) as a warp sees them away from a row's edge
    strides = [a.piecewise_lane_stride(facts.atoms) for a in inside]
    for access, stride in zip(inside, strides, strict=True):
        if stride is None or stride.value() not in (0, 1):
            raise Unsupported(f"{access.array}: neighbouring threads do not read together")
    if Form.constant(1) not in strides:
        raise Unsupported("nothing the threads along x read together")
    for reduction in loop.reductions:
        check_initial(tree, loop, reduction)
    bound = guard.bound_of(mapped[0].name)
    assert bound is not None
    try:
        return bound_terms(tree, bound.bound)[1], loop
    except NotInSizes as exc:
        raise Unsupported(str(exc)) from exc


def _assumptions(tree: KernelTree, loop: Loop) -> tuple[str, ...]:
    found = []
    for reduction in loop.reductions:
        kind = declared_type(tree, reduction.accumulators[0]) or "float"
        if reduction.combine in ("sum", "product") and kind in ("float", "double", "half", "__half"):
            found.append(
                f"the {reduction.combine} into {reduction.accumulators[0]} is regrouped across threads"
            )
    return tuple(found)


def _body(tree: KernelTree, facts: KernelFacts, loop: Loop, width: int, height: int) -> str:
    """The kernel's statements in order, the bounds check as a flag: the loop for in-range outputs, the
    merge for every thread, then the statements after the loop for thread y = 0 of in-range outputs."""
    guard = facts.guard
    assert guard is not None
    unit = tree.indent_unit()
    names = local_names(tree, "inside", "other", "other_at", "other_sum", "joint", "partial", "y")
    top = [s for s in tree.body.named_children if s.type != "comment"]
    position = next(n for n, s in enumerate(top) if s == guard.statement)
    before = [tree.text(s) for s in top[:position]]
    condition = guard.statement.child_by_field_name("condition")
    assert condition is not None and condition.named_children
    written = tree.text(condition.named_children[0])
    flag = f"!({written})" if guard.early_return else written
    if guard.early_return:
        inner = top[position + 1 :]
    else:
        consequence = guard.statement.child_by_field_name("consequence")
        assert consequence is not None
        inner = [s for s in consequence.named_children if s.type != "comment"]
    at = next((n for n, s in enumerate(inner) if s == loop.node), None)
    if at is None:
        raise Unsupported("the loop is not under the bounds check")
    accumulators = {a for r in loop.reductions for a in r.accumulators}
    hoisted, prefix = [], []
    for statement in inner[:at]:
        if statement.type != "declaration":
            raise Unsupported("a statement before the loop that is not a declaration")
        declared = set(declared_values(statement)) | {
            text(d) for d in statement.children_by_field_name("declarator") if d.type == "identifier"
        }
        (hoisted if declared & accumulators else prefix).append(tree.text(statement))
    if any(n.type == "return_statement" for s in inner[:at] for n in walk(s)):
        raise Unsupported("a return before the loop")
    after = [tree.text(s) for s in inner[at + 1 :]]
    lines = [*before, f"const bool {names['inside']} = {flag};", *hoisted, f"if ({names['inside']}) {{"]
    lines += [unit + line for line in prefix]
    lines += [unit + line for line in _split_loop(tree, loop).split("\n")]
    lines.append("}")
    lines += _merged(tree, loop, names, width, height)
    lines.append(f"if ({names['inside']} && threadIdx.y == 0) {{")
    lines += [unit + line for line in prefix + after]
    lines.append("}")
    indent = unit
    return "{\n" + "\n".join(indent + line if line else "" for line in "\n".join(lines).split("\n")) + "\n}"


def _split_loop(tree: KernelTree, loop: Loop) -> str:
    """The loop as written, starting at threadIdx.y past its start and stepping by blockDim.y; its
    iterations UNROLL at a time where the loop declares its variable (see `_unrolled`)."""
    unrolled = _unrolled(tree, loop)
    if unrolled is not None:
        return unrolled
    base = loop.node.start_byte
    source = tree.data[base : loop.node.end_byte].decode("utf-8")
    moved = strided(tree, loop, "threadIdx.y", "blockDim.y")
    edits = sorted(((a - base, b - base, new) for a, b, new in moved), reverse=True)
    for a, b, new in edits:
        source = source[:a] + new + source[b:]
    indent = tree.indent_at(loop.node.start_byte)
    return "\n".join(line[len(indent) :] if line.startswith(indent) else line for line in source.split("\n"))


def _unrolled(tree: KernelTree, loop: Loop) -> str | None:
    """The split loop with UNROLL iterations a step, their loads issued together, then the last few one at
    a time: the same iterations in the same order a thread. None where the loop does not declare its
    variable, its condition is not `k < bound` (true further on implies true before), or the body leaves
    the loop."""
    initializer, condition = (loop.node.child_by_field_name(f) for f in ("initializer", "condition"))
    if initializer is None or condition is None or initializer.type != "declaration":
        return None
    declarators = initializer.children_by_field_name("declarator")
    kind = initializer.child_by_field_name("type")
    value = declarators[0].child_by_field_name("value") if len(declarators) == 1 else None
    if kind is None or value is None or not _upper_bound(tree, condition, loop.variable):
        return None
    body = loop.body
    if any(n.type == "break_statement" and not inside_loop(n, body) for n in walk(body)):
        return None
    variable, start = loop.variable, tree.text(value)
    names = local_names(tree, f"{variable}0", "step")
    first, step = names[f"{variable}0"], names["step"]

    def at(position: str) -> str:
        def renamed(node: Node) -> str | None:
            return position if node.type == "identifier" and tree.text(node) == variable else None

        return tree.substituted(condition, renamed)

    unit = tree.indent_unit()
    statements = list(body.named_children) if body.type == "compound_statement" else [body]
    inner = [
        line
        for statement in statements
        for line in reindent(tree.text(statement), tree.indent_at(statement.start_byte), unit * 2).split("\n")
    ]
    start = "threadIdx.y" if start.strip() == "0" else f"({start}) + threadIdx.y"
    last = f"{first} + {UNROLL - 1} * ({tree.text(kind)})blockDim.y"  # unsigned would turn the test so
    lines = [
        f"// {UNROLL} iterations a thread at once, their loads in flight together; then the last few",
        f"{tree.text(kind)} {first} = {start};",
        f"for (; {at(f'({last})')}; {first} += {UNROLL} * blockDim.y) {{",
        f"{unit}#pragma unroll",
        f"{unit}for (int {step} = 0; {step} < {UNROLL}; ++{step}) {{",
        f"{unit * 2}const {tree.text(kind)} {variable} = {first} + {step} * blockDim.y;",
        *inner,
        f"{unit}}}",
        "}",
        f"for (; {at(first)}; {first} += blockDim.y) {{",
        f"{unit}const {tree.text(kind)} {variable} = {first};",
        *(line[len(unit) :] if line.startswith(unit) else line for line in inner),
        "}",
    ]
    return "\n".join(lines)


def _upper_bound(tree: KernelTree, condition: Node, variable: str) -> bool:
    """Whether the condition is `variable < bound` (or `<=`, or the bound on the left of `>`/`>=`)."""
    condition = unwrap(condition)
    operator, left, right = (condition.child_by_field_name(f) for f in ("operator", "left", "right"))
    if condition.type != "binary_expression" or operator is None or left is None or right is None:
        return False
    if operator.type in ("<", "<="):
        return unwrap(left).type == "identifier" and tree.text(unwrap(left)) == variable
    if operator.type in (">", ">="):
        return unwrap(right).type == "identifier" and tree.text(unwrap(right)) == variable
    return False


def _merged(tree: KernelTree, loop: Loop, names: dict[str, str], width: int, height: int) -> list[str]:
    """Each thread's partial results through shared memory; thread y = 0 merges them in order."""
    unit = tree.indent_unit()
    lines = ["// the threads along y hold partial results: thread y = 0 merges them in order", "{"]
    merges: list[tuple[list[tuple[str, str, str]], list[str]]] = []
    for reduction in loop.reductions:
        kind = declared_type(tree, reduction.accumulators[0]) or "float"
        others, merging, _, _ = merge(tree, reduction, names, kind)
        merges.append((others, merging))
        for _, other_kind, accumulator in others:
            lines.append(
                f"{unit}__shared__ {other_kind} {accumulator}_{names['partial']}[{height}][{width}];"
            )
    for others, _ in merges:
        for _, _, accumulator in others:
            lines.append(f"{unit}{accumulator}_{names['partial']}[threadIdx.y][threadIdx.x] = {accumulator};")
    lines.append(f"{unit}__syncthreads();")
    y = names["y"]
    lines.append(f"{unit}if (threadIdx.y == 0) {{")
    lines.append(f"{unit}{unit}for (int {y} = 1; {y} < blockDim.y; ++{y}) {{")
    deep = unit * 4
    for others, merging in merges:
        lines.append(f"{unit * 3}{{")
        for other, other_kind, accumulator in others:
            lines.append(f"{deep}{other_kind} {other} = {accumulator}_{names['partial']}[{y}][threadIdx.x];")
        lines += [f"{deep}{line}" for line in merging]
        lines.append(f"{unit * 3}}}")
    lines += [f"{unit}{unit}}}", f"{unit}}}", "}"]
    return lines
