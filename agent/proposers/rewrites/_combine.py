"""What the lane-splitting rewrites share: an accumulator's type and start, and how two partial results
of a reduction merge into one (the code a shuffle loop or a shared-memory pass runs for each partner)."""

from __future__ import annotations

from cuda_agent.agent.analysis.facts import (
    AND,
    ARGMAX,
    ARGMIN,
    FIND_FIRST,
    IDEMPOTENT,
    LOGSUMEXP,
    MAX,
    MIN,
    OR,
    PRODUCT,
    REASSOCIATED,
    SUM,
    XOR,
    Loop,
    Reduction,
)
from cuda_agent.agent.analysis.values import unwrap
from cuda_agent.agent.proposers.tree import FULL_MASK, KernelTree, declarator_name, line_indent, walk
from tree_sitter import Node

# The width of a whole block sharing one loop (its warps' results then merged through shared memory).
BLOCK = 0


class Unsupported(Exception):
    """The reduction cannot be split this way; the message says why (for debugging)."""


IDENTITY = {
    SUM: ("0", "0.0", "0.0f", "0.f", "0.0F", "0u", "0.", "0L", "0ll"),
    XOR: ("0", "0u"),
    OR: ("0", "0u"),
}
IDENTITY |= {PRODUCT: ("1", "1.0", "1.0f", "1.f", "1.0F", "1u", "1.")}
INTEGRAL = (
    "int",
    "unsigned",
    "unsigned int",
    "long",
    "long long",
    "size_t",
    "int64_t",
    "uint32_t",
    "int32_t",
)


def declared_type(tree: KernelTree, name: str) -> str | None:
    for node in walk(tree.body):
        if node.type != "declaration":
            continue
        for declarator in node.children_by_field_name("declarator"):
            inner: Node | None = declarator
            while inner is not None and inner.type != "identifier":
                inner = inner.child_by_field_name("declarator")
            if inner is not None and tree.text(inner) == name:
                type_node = node.child_by_field_name("type")
                return tree.text(type_node) if type_node is not None else None
    return None


def check_initial(tree: KernelTree, loop: Loop, reduction: Reduction) -> None:
    """A sum (product, xor) entering the loop must hold its identity: each lane adds its part to it, so
    any other starting value would be counted 32 times. Max, min and their positions repeat harmlessly."""
    if reduction.combine in IDEMPOTENT or reduction.combine == FIND_FIRST:
        return
    # the online softmax's sum must start at 0 (its maximum may start anywhere)
    name = reduction.accumulators[1 if reduction.combine == LOGSUMEXP else 0]
    combine = SUM if reduction.combine == LOGSUMEXP else reduction.combine
    last: Node | None = None  # the last setting of the accumulator before the loop: its value there
    for node in walk(tree.body):
        if node.start_byte >= loop.node.start_byte:
            break
        if node.type == "init_declarator" and declarator_name(node) == name:
            last = node.child_by_field_name("value")
        elif node.type in ("assignment_expression", "update_expression"):
            target = node.child_by_field_name("left" if node.type == "assignment_expression" else "argument")
            if target is not None and tree.text(unwrap(target)) == name:
                operator = node.child_by_field_name("operator")
                plain = operator is not None and operator.type == "=" and node.type == "assignment_expression"
                last = node.child_by_field_name("right") if plain else node
    if last is None or last.type in ("assignment_expression", "update_expression"):
        raise Unsupported(f"{name} is updated before the loop")
    if tree.text(last).strip() not in IDENTITY[combine] or _inside_other_loop(tree, last):
        raise Unsupported(f"{name} does not start from its identity")


def _inside_other_loop(tree: KernelTree, node: Node) -> bool:
    parent = node.parent
    while parent is not None and parent != tree.body:
        if parent.type in ("for_statement", "while_statement", "do_statement"):
            return True
        parent = parent.parent
    return False


def merge(
    tree: KernelTree, reduction: Reduction, names: dict[str, str], kind: str
) -> tuple[list[tuple[str, str, str]], list[str], str, str | None]:
    """(the other lane's values: (name, type, accumulator), statements merging them in, a comment, the
    assumption the merge makes)."""
    value = reduction.accumulators[0]
    other = names["other"]
    floating = kind not in INTEGRAL
    assumption = None
    if reduction.combine in REASSOCIATED and floating:
        assumption = f"the {reduction.combine} into {value} is reassociated across the lanes"
        assumption += " (within the spec's tolerance)"
    operators = {SUM: "+=", PRODUCT: "*=", OR: "|=", AND: "&=", XOR: "^="}
    if reduction.combine in operators:
        return [(other, kind, value)], [f"{value} {operators[reduction.combine]} {other};"], "", assumption
    if reduction.combine in (MAX, MIN):
        if reduction.combiner not in ("?:", "if", ">", "<"):
            return [(other, kind, value)], [f"{value} = {reduction.combiner}({value}, {other});"], "", None
        comparison = ">" if reduction.combine == MAX else "<"
        return [(other, kind, value)], [f"if ({other} {comparison} {value}) {value} = {other};"], "", None
    if reduction.combine in (ARGMAX, ARGMIN):
        at = reduction.accumulators[1]
        other_at = names["other_at"]
        comparison = ">" if reduction.combine == ARGMAX else "<"
        tie = "<" if reduction.first else ">"
        order = "first" if reduction.first else "last"
        unit = tree.indent_unit()
        merge = [
            f"if ({other} {comparison} {value} || ({other} == {value} && {other_at} {tie} {at})) {{",
            f"{unit}{value} = {other};",
            f"{unit}{at} = {other_at};",
            "}",
        ]
        others = [(other, kind, value), (other_at, declared_type(tree, at) or "int", at)]
        return others, merge, f"the lanes' best, the {order} position on a tie, as the loop keeps it", None
    if reduction.combine == FIND_FIRST:
        found, other_found = names["found"], names["other_found"]
        unit = tree.indent_unit()
        merge_lines = [
            f"if ({other_found} && (!{found} || {other} < {value})) {{",
            f"{unit}{value} = {other};",
            f"{unit}{found} = true;",
            "}",
        ]
        return (
            [(other_found, "bool", found), (other, kind, value)],
            merge_lines,
            "the first position any lane found, or the start where none did",
            None,
        )
    if reduction.combine == LOGSUMEXP:
        total, exp = reduction.accumulators[1], reduction.combiner
        other_sum, joint = names["other_sum"], names["joint"]
        unit = tree.indent_unit()
        merge = [
            f"{kind} {joint} = fmaxf({value}, {other});",
            f"{total} = ({value} == {joint} ? {total} : {total} * {exp}({value} - {joint}))",
            f"{unit}+ ({other} == {joint} ? {other_sum} : {other_sum} * {exp}({other} - {joint}));",
            f"{value} = {joint};",
        ]
        return (
            [(other, kind, value), (other_sum, declared_type(tree, total) or kind, total)],  # `double sum`
            merge,
            "the lanes' running maxima and sums: each sum rescaled to the joint maximum",
            "the online softmax's sum is regrouped across the lanes (within the spec's tolerance)",
        )
    raise Unsupported(f"no warp combine for {reduction.combine}")


def strided(tree: KernelTree, loop: Loop, offset: str, step: str) -> list[tuple[int, int, str]]:
    """Edits making `for (int k = a; k < n; ++k)` start `offset` past a and step by `step`, as one of the
    threads that share it: `for (int k = a + lane; k < n; k += 32)`."""
    initializer, update = (
        loop.node.child_by_field_name("initializer"),
        loop.node.child_by_field_name("update"),
    )
    assert initializer is not None and update is not None
    if initializer.type == "declaration":
        (declarator,) = initializer.children_by_field_name("declarator")
        start = declarator.child_by_field_name("value")
    else:
        start = initializer.child_by_field_name("right")
    assert start is not None
    begin = tree.text(start)
    new_start = (
        offset
        if begin.strip() == "0"
        else (f"{begin} + {offset}" if _simple(start) else f"({begin}) + {offset}")
    )
    return [
        (start.start_byte, start.end_byte, new_start),
        (update.start_byte, update.end_byte, f"{loop.variable} += {step}"),
    ]


def _simple(node: Node) -> bool:
    node = unwrap(node)
    return node.type in ("identifier", "number_literal", "field_expression", "call_expression") or (
        node.type == "binary_expression"
        and (op := node.child_by_field_name("operator")) is not None
        and op.type in ("+", "-", "*", "/", "%")
    )


def search_flag(tree: KernelTree, loop: Loop, reduction: Reduction, found: str) -> list[tuple[int, int, str]]:
    """Edits giving a split search its flag: false before the loop, true where the position is taken (each
    lane's own search stops at its first find; the lanes' finds are merged after the loop)."""
    (guard,) = reduction.statements
    consequence = guard.child_by_field_name("consequence")
    assert consequence is not None
    taken = next(s for s in consequence.named_children if s.type == "expression_statement")
    indent = tree.indent_at(loop.node.start_byte)
    inner = tree.indent_at(taken.start_byte)
    return [
        (loop.node.start_byte, loop.node.start_byte, f"bool {found} = false;\n{indent}"),
        (taken.end_byte, taken.end_byte, f"\n{inner}{found} = true;"),
    ]


def across_lanes(
    tree: KernelTree,
    loop: Loop,
    reduction: Reduction,
    names: dict[str, str],
    width: int,
    indent: str | None = None,
    cluster: int = 1,
) -> tuple[str, str | None]:
    """The code that finishes the reduction across the lanes, to go right after the loop: shuffles
    within a warp (or a group of lanes); for a block per output, then each warp's result through shared
    memory, merged in the same order by every thread (all of them go on with the result); for a cluster
    of blocks per output, then each block's result read from its shared memory by every thread of the
    cluster, in rank order (every block goes on with the same result)."""
    indent = line_indent(tree, loop.node) if indent is None else indent
    unit = tree.indent_unit()
    value = reduction.accumulators[0]
    kind = declared_type(tree, value) or "float"
    others, merging, comment, assumption = merge(tree, reduction, names, kind)
    lanes = min(width, 32) if width else 32
    step = names["offset"]
    head = f"for (int {step} = {lanes // 2}; {step} > 0; {step} >>= 1)"
    mask = names["group_mask"] if width and width < 32 else FULL_MASK
    suffix = f", {width}" if width and width < 32 else ""
    shuffles = [f"{t} {o} = __shfl_xor_sync({mask}, {a}, {step}{suffix});" for o, t, a in others]
    lines = [f"// {comment}"] if comment else []
    compact = _compact(reduction, merging, others)
    if compact is not None:
        lines.append(f"{head} {compact.replace(others[0][0], shuffles[0].split(' = ', 1)[1][:-1])}")
    else:
        lines += [f"{head} {{", *(unit + line for line in shuffles + merging), "}"]
    if not width:
        parts = [(f"{a}_{names['part']}", t, a, o) for o, t, a in others]
        warp, count = names["w"], "blockDim.x / 32"
        lines += [
            "// then the warps' results, through shared memory",
            "{",
            *(f"{unit}__shared__ {t} {p}[32];" for p, t, _, _ in parts),
            f"{unit}if (threadIdx.x % 32 == 0) {{",
            *(f"{unit}{unit}{p}[threadIdx.x / 32] = {a};" for p, _, a, _ in parts),
            f"{unit}}}",
            f"{unit}__syncthreads();",
            *(f"{unit}{a} = {p}[0];" for p, _, a, _ in parts),
            f"{unit}for (int {warp} = 1; {warp} < {count}; ++{warp}) {{",
            *(f"{unit}{unit}{t} {o} = {p}[{warp}];" for p, t, _, o in parts),
            *(unit + unit + line for line in merging),
            f"{unit}}}",
            f"{unit}__syncthreads();  // the partials are read before they are written again",
            "}",
        ]
    if cluster > 1:
        lines += _across_cluster(others, merging, names, cluster, unit)
    return "".join(f"\n{indent}{line}" for line in lines), assumption


def _across_cluster(
    others: list[tuple[str, str, str]], merging: list[str], names: dict[str, str], cluster: int, unit: str
) -> list[str]:
    """Each block's result (held by all its threads) into its shared memory, then every thread reads the
    cluster's blocks' results (distributed shared memory, sm_90) and merges them in rank order; the
    cluster barriers order the writes before the reads, and the reads before any block exits."""
    slots = [(f"{a}_{names['block_part']}", t, a, o) for o, t, a in others]
    rank = names["rank"]

    def read(slot: str, kind: str, at: str) -> str:
        return f"*static_cast<const {kind}*>(__cluster_map_shared_rank(&{slot}, {at}))"

    return [
        f"// then the {cluster} blocks' results, read from each block's shared memory (distributed)",
        "{",
        *(f"{unit}__shared__ {t} {q};" for q, t, _, _ in slots),
        f"{unit}if (threadIdx.x == 0) {{",
        *(f"{unit}{unit}{q} = {a};" for q, _, a, _ in slots),
        f"{unit}}}",
        f"{unit}__cluster_barrier_arrive();  // every block's result written before any is read",
        f"{unit}__cluster_barrier_wait();",
        *(f"{unit}{a} = {read(q, t, '0')};" for q, t, a, _ in slots),
        f"{unit}for (unsigned {rank} = 1; {rank} < {cluster}; ++{rank}) {{",
        *(f"{unit}{unit}{t} {o} = {read(q, t, rank)};" for q, t, _, o in slots),
        *(unit + unit + line for line in merging),
        f"{unit}}}",
        f"{unit}__cluster_barrier_arrive();  // read before any block goes on, or exits",
        f"{unit}__cluster_barrier_wait();",
        "}",
    ]


def _compact(reduction: Reduction, merge: list[str], others: list[tuple[str, str, str]]) -> str | None:
    """The merge as one statement with the shuffle in it (`acc += __shfl_xor_sync(...)`), where it can be."""
    simple = reduction.combine in (SUM, PRODUCT, OR, AND, XOR) or (
        reduction.combine in (MAX, MIN) and reduction.combiner not in ("?:", "if", ">", "<")
    )
    return merge[0] if simple and len(others) == 1 else None
