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
from cuda_agent.agent.proposers.rewrites._bounds import NotInSizes, bound_terms, guarded_parts
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
        outputs, loops = _recognise(tree, facts)
        loop = loops[0]
        passes = f"the loop over {loop.variable}" if len(loops) == 1 else f"each of the {len(loops)} loops"
        return [
            build_candidate(
                tree,
                body=_body(tree, facts, loop, width, height)
                if len(loops) == 1
                else _passes_body(tree, facts, loops, width, height),
                launch=LaunchSpec(block=(width, height), grid=(f"ceil_div({outputs}, {width})", "1")),
                description=f"{width} outputs a block, {passes} split across {height} "
                "threads along y, partial results merged through shared memory",
                proposer=PROPOSER,
                assumptions=tuple(a for each in loops for a in _assumptions(tree, each)),
            )
            for width, height in SHAPES
        ]
    except Unsupported:
        return []


def _recognise(tree: KernelTree, facts: KernelFacts) -> tuple[str, list[Loop]]:
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
    if not loops or len(facts.loops) != len(loops):
        raise Unsupported("no loop, or a nested one")
    # a pass that stores (`y[r * cols + c] = ...`) may come last, after reductions it reads
    *reducing, last = loops
    storing = last if not last.reductions and any(a.write for a in facts.accesses_in(last)) else None
    for loop in reducing if storing is not None else loops:
        if not loop.independent or not loop.reductions or loop.step.value() != 1:
            raise Unsupported("not a reduction loop with independent unit steps")
        if any(r.combine == FIND_FIRST for r in loop.reductions):
            raise Unsupported("a search, whose lanes stop at their own finds")
        if any(a.write for a in facts.accesses_in(loop)):
            raise Unsupported("the loop stores")
        for reduction in loop.reductions:
            check_initial(tree, loop, reduction)
    if storing is not None and (not storing.independent or storing.step.value() != 1 or not reducing):
        raise Unsupported("the storing pass has dependent iterations, or no reduction before it")
    inside = [a for loop in loops for a in facts.accesses_in(loop)]
    # a flat index's pieces (`c = idx % C`) as a warp sees them away from a row's edge
    strides = [a.piecewise_lane_stride(facts.atoms) for a in inside]
    for access, stride in zip(inside, strides, strict=True):
        if stride is None or stride.value() not in (0, 1):
            raise Unsupported(f"{access.array}: neighbouring threads do not read together")
        if access.write and (
            stride != Form.constant(1) or access.stride(storing.variable) in (None, Form.constant(0))
        ):
            raise Unsupported(f"{access.array}: a store the threads along y would share")
    if Form.constant(1) not in strides:
        raise Unsupported("nothing the threads along x read together")
    bound = guard.bound_of(mapped[0].name)
    assert bound is not None
    try:
        return bound_terms(tree, bound.bound)[1], loops
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
    unit = tree.indent_unit()
    names = local_names(tree, "inside", "other", "other_at", "other_sum", "joint", "partial", "y")
    before, flag, inner = _guarded_texts(tree, facts)
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


def _passes_body(tree: KernelTree, facts: KernelFacts, loops: list[Loop], width: int, height: int) -> str:
    """Several passes over the same outputs (a maximum, then a sum against it, then the stores): each
    loop split along y for in-range outputs; after a reduction thread y = 0 merges the partial results
    and shares them back through shared memory, so every thread runs the next pass with the output's
    values. The statements between the loops run in every thread (they touch no array); those after a
    last reduction, in thread y = 0 of in-range outputs."""
    unit = tree.indent_unit()
    names = local_names(tree, "inside", "other", "other_at", "other_sum", "joint", "partial", "y")
    before, flag, inner = _guarded_texts(tree, facts)
    at = [next((n for n, s in enumerate(inner) if s == loop.node), None) for loop in loops]
    if None in at:
        raise Unsupported("a loop is not directly under the bounds check")
    ends = [*(n for n in at if n is not None), len(inner)]
    lines = [*before, f"const bool {names['inside']} = {flag};"]
    for statement in inner[: ends[0]] + [
        s for k in range(1, len(loops)) for s in inner[ends[k - 1] + 1 : ends[k]]
    ]:
        _check_safe_everywhere(tree, facts, statement)
    for k, loop in enumerate(loops):
        lines += [tree.text(s) for s in inner[(ends[k - 1] + 1 if k else 0) : ends[k]]]
        lines.append(f"if ({names['inside']}) {{")
        lines += [unit + line for line in _split_loop(tree, loop).split("\n")]
        lines.append("}")
        if loop.reductions:
            lines += _merged(tree, loop, names, width, height, shared_back=k + 1 < len(loops))
    after = [tree.text(s) for s in inner[ends[-2] + 1 :]]
    if after:
        if not loops[-1].reductions:
            raise Unsupported("statements after the storing pass")
        lines += [f"if ({names['inside']} && threadIdx.y == 0) {{", *(unit + a for a in after), "}"]
    return "{\n" + "\n".join(unit + line if line else "" for line in "\n".join(lines).split("\n")) + "\n}"


def _check_safe_everywhere(tree: KernelTree, facts: KernelFacts, statement: Node) -> None:
    """A statement between the passes runs in out-of-range threads too: it may declare and compute, but
    touch no array and call nothing that could."""
    span = (statement.start_byte, statement.end_byte)
    if any(span[0] <= a.node.start_byte < span[1] for a in facts.accesses):
        raise Unsupported("a statement between the loops touches an array")
    if statement.type not in ("declaration", "expression_statement"):
        raise Unsupported("a statement between the loops that is not a declaration or an assignment")
    if any(
        n.type in ("subscript_expression", "pointer_expression", "return_statement") for n in walk(statement)
    ):
        raise Unsupported("a statement between the loops reads through a pointer")


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


def _merged(
    tree: KernelTree, loop: Loop, names: dict[str, str], width: int, height: int, *, shared_back: bool = False
) -> list[str]:
    """Each thread's partial results through shared memory; thread y = 0 merges them in order (and with
    `shared_back`, writes them back for every thread to read)."""
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
    lines.append(f"{unit}{unit}}}")
    if shared_back:
        for others, _ in merges:
            for _, _, accumulator in others:
                lines.append(f"{unit}{unit}{accumulator}_{names['partial']}[0][threadIdx.x] = {accumulator};")
    lines.append(f"{unit}}}")
    if shared_back:
        lines.append(f"{unit}__syncthreads();  // the merged values, for every thread's next pass")
        for others, _ in merges:
            for _, _, accumulator in others:
                lines.append(f"{unit}{accumulator} = {accumulator}_{names['partial']}[0][threadIdx.x];")
    lines.append("}")
    return lines


def _guarded_texts(tree: KernelTree, facts: KernelFacts) -> tuple[list[str], str, list[Node]]:
    before, flag, inner = guarded_parts(tree, facts)
    return [tree.text(s) for s in before], flag, inner
