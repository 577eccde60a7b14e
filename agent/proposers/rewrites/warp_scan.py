"""A thread per row keeping a running total along the row -> a warp per row, the running total taken 32
elements at a time by a shuffle scan.

Driven by the analysis: a thread per output (the bounded global index) whose one loop carries a single
local from iteration to iteration, updated once by a sum (`running += x[row * L + j]`) and read by the
loop's stores (`out[row * L + j] = running`, or before the update for an exclusive scan). Neighbouring
threads then read and write addresses a row apart, and each thread's loads wait on one another. A
cumulative sum, a CDF, the offsets of a compaction written per row.

Rewritten with the user's statements kept: the owner index from the warp's number; the loop walks the
row a warp-wide chunk at a time, lane l at element j = chunk + l; each lane's value is summed with the
lanes before it by `__shfl_up_sync` (a log-step scan), the chunk's stores run on each lane with the running
total as the original had it at j, and the chunk's total, from lane 31, carries on to the next chunk.
The first candidates take four chunks a step: their loads issued together, their scans interleaved.
Floating-point sums are reassociated (an assumption the candidate states); integer ones are exact.
"""

from __future__ import annotations

from cuda_agent.agent.analysis import KernelFacts, analysed, assigned_names
from cuda_agent.agent.analysis.facts import Loop
from cuda_agent.agent.analysis.forms import LANE, Form
from cuda_agent.agent.analysis.normalise import inlined_loop_locals
from cuda_agent.agent.analysis.values import text, unwrap
from cuda_agent.agent.candidates import Candidate
from cuda_agent.agent.proposers.rewrites._bounds import as_factor
from cuda_agent.agent.proposers.rewrites._combine import Unsupported, declared_type
from cuda_agent.agent.proposers.rewrites._one_thread import pure, pure_declaration
from cuda_agent.agent.proposers.rewrites.warp_per_output import lane_zero_stores, output_owners, owner_edits
from cuda_agent.agent.proposers.tree import (
    Edit,
    KernelTree,
    apply_to_body,
    build_candidate,
    line_indent,
    local_names,
    single_declaration,
    statements,
    walk,
)
from cuda_agent.agent.spec import LaunchSpec
from cuda_agent.agent.targets import KernelTarget
from tree_sitter import Node

PROPOSER = "rewrite:warp-scan"
# (threads a block, warp-wide chunks a step): 8 or 4 rows a block; four chunks a step put four loads of a
# warp in flight at once (one chunk's load, then its scan, left the memory idle: 0.67x torch.compile for
# a cumulative sum, H100) and their four scans are independent
SHAPES = ((256, 4), (128, 4), (256, 1))
_SUMMABLE = frozenset({"float", "double", "int", "unsigned", "unsigned int", "long", "long long"})


def propose(target: KernelTarget) -> list[Candidate]:
    if target.spec is None:
        return []
    # `float v = x[..]; running += v;` is read as `running += x[..];`
    found = analysed(inlined_loop_locals(target))
    if found is None:
        return []
    tree, facts = found
    try:
        if facts.uses_shared or facts.barriers or facts.atomics or facts.thread_uses or facts.unmodelled:
            raise Unsupported("shared memory, barriers, atomics or builtins in the body")
        if facts.guard is None:
            raise Unsupported("no bounds check")
        owners, batch = output_owners(tree, facts)
        if len(owners) != 1 or batch:
            raise Unsupported("not one output index")
        if len(facts.loops) != 1:
            raise Unsupported("not exactly one loop")
        (loop,) = facts.loops
        names = local_names(
            tree, "warp", "lane", "chunk", "mine", "offset", "other", "previous", "before", "lane_in", "g"
        )
        edits = owner_edits(tree, facts, owners, names, 32)
        edits += lane_zero_stores(tree, facts, [loop], names["lane"])
        bodies = {
            chunks: apply_to_body(tree, [*edits, _scan_loop(tree, facts, loop, names, chunks)])
            for chunks in dict.fromkeys(c for _, c in SHAPES)
        }
    except Unsupported:
        return []
    (owner,) = owners
    carried = next(iter(loop.carried))
    return [
        build_candidate(
            tree,
            body=bodies[chunks],
            launch=LaunchSpec(block=(block,), grid=(f"ceil_div({owner.spec}, block.x // 32)",)),
            description=f"one warp per {owner.name}, block {block}: the running total {carried} along "
            f"{loop.variable} taken {32 * chunks} elements at a time by warp-shuffle scans",
            proposer=PROPOSER,
            assumptions=(f"the running sum {carried} reassociated: a chunk's values summed as a scan tree",),
        )
        for block, chunks in SHAPES
    ]


def _scan_loop(tree: KernelTree, facts: KernelFacts, loop: Loop, n: dict[str, str], chunks: int) -> Edit:
    """The loop rewritten whole: `chunks` chunks of 32 elements a step (loaded together, then each
    scanned), the running total by a shuffle scan."""
    if len(loop.carried) != 1 or loop.reductions or loop.step.value() != 1:
        raise Unsupported("not one running total in a unit-step loop")
    (total,) = loop.carried
    kind = declared_type(tree, total)
    if kind is None or " ".join(kind.replace("const", "").split()) not in _SUMMABLE:
        raise Unsupported("the running total is not a number the shuffles carry")
    if any(node.type in ("return_statement", "break_statement", "continue_statement", "goto_statement")
           for node in walk(loop.body)):  # fmt: skip
        raise Unsupported("the loop may be left or skipped early")
    body = statements(loop.body) if loop.body.type == "compound_statement" else [loop.body]
    leading = 0
    while leading < len(body) and body[leading].type == "declaration":
        leading += 1
    values, body = _locals(tree, body[:leading]), body[leading:]
    updates = [i for i, s in enumerate(body) if total in assigned_names(s)]
    if len(updates) != 1:
        raise Unsupported("the running total is updated more than once")
    (at,) = updates
    value = _added(tree, body[at], total)
    rest = [s for i, s in enumerate(body) if i != at]
    if {text(n) for s in rest for n in walk(s) if n.type == "identifier"} & set(values):
        raise Unsupported("a local the loop declares is read besides the update")
    if any(s.type != "expression_statement" or assigned_names(s) for i, s in enumerate(body) if i != at):
        raise Unsupported("statements besides the update and the stores")
    if total in {text(node) for node in walk(value) if node.type == "identifier"}:
        raise Unsupported("the added value reads the total")
    if not pure(tree, value):
        raise Unsupported("the added value has effects of its own (an increment, an atomic)")
    inside = facts.accesses_in(loop)
    for access in inside:
        if access.write and access.stride(loop.variable) in (None, Form()):
            raise Unsupported(f"{access.array}: a store every iteration does not move")
    apart = [a for a in inside if a.stride(LANE) not in (Form(), Form.constant(1))]
    if not any(a.stride(loop.variable) == Form.constant(1) for a in apart):
        raise Unsupported("nothing a warp would then read together")
    together = [a for a in inside if a.stride(LANE) == Form.constant(1)]
    if any(a.stride(loop.variable) not in (Form(), Form.constant(1)) for a in together):
        raise Unsupported("an access neighbouring threads read together that the row's lanes would not")
    stored_before = {a.array for a in inside if a.write and body[0:at] and _within(a.node, body[0:at])}
    if stored_before & {a.array for a in inside if not a.write and _within(a.node, [value])}:
        raise Unsupported("a store before the update that the update may read back")
    start, bound = _range(tree, loop)
    added = tree.substituted(
        value, lambda node: values.get(text(node)) if node.type == "identifier" else None
    )
    # a local's value is converted to its type already: once is enough when that is the total's
    converted = (
        added if added.startswith(f"(({kind})(") and added in values.values() else f"({kind})({added})"
    )
    indent = line_indent(tree, loop.node)
    inner = indent + "    "
    lane, offset, mine, before = n["lane"], n["offset"], n["mine"], n["before"]
    j, chunk, lane_in = loop.variable, n["chunk"], n["lane_in"]

    def guarded(part: list[Node], at: str) -> str:
        if not part:
            return ""
        code = " ".join(tree.text(s) for s in part)
        return f"{at}if ({lane_in}) {{ {code} }}\n"

    exclusive = ""
    mine_g = f"{mine}[{n['g']}]" if chunks > 1 else mine
    deeper = inner + "    " if chunks > 1 else inner
    if at > 0:  # the stores before the update see the total up to the element before
        exclusive = (
            # every lane shuffles (a shuffle some lanes skip, under a full mask, is an illegal instruction)
            f"{deeper}const {kind} {n['previous']} = __shfl_up_sync(0xffffffffu, {mine_g}, 1);\n"
            f"{deeper}{total} = {before} + ({lane} > 0 ? {n['previous']} : ({kind})0);\n"
            + guarded(body[:at], deeper)
        )
    step = (
        f"{deeper}const {kind} {before} = {total};\n"
        f"{exclusive}"
        f"{deeper}{total} = {before} + {mine_g};\n"
        f"{guarded(body[at + 1 :], deeper)}"
        f"{deeper}{total} = {before} + __shfl_sync(0xffffffffu, {mine_g}, 31);  // the chunk sum, all lanes\n"
    )
    if chunks == 1:
        text_ = (
            f"// a warp-wide chunk at a time ({j} = {chunk} + {lane}), the running total by a shuffle scan\n"
            f"{indent}for (int {chunk} = {start}; {chunk} < {bound}; {chunk} += 32) {{\n"
            f"{inner}const int {j} = {chunk} + {lane};\n"
            f"{inner}const bool {lane_in} = {j} < {bound};\n"
            f"{inner}{kind} {mine} = {lane_in} ? {converted} : ({kind})0;\n"
            f"{inner}for (int {offset} = 1; {offset} < 32; {offset} <<= 1) {{\n"
            f"{inner}    {kind} {n['other']} = __shfl_up_sync(0xffffffffu, {mine}, {offset});\n"
            f"{inner}    if ({lane} >= {offset}) {mine} += {n['other']};\n"
            f"{inner}}}\n"
            f"{step}"
            f"{indent}}}"
        )
        return (loop.node.start_byte, loop.node.end_byte, text_)
    g = n["g"]
    at_g = f"{chunk} + 32 * {g} + {lane}"
    text_ = (
        f"// {chunks} warp-wide chunks a step ({j} = {at_g}): their loads in flight together, then\n"
        f"{indent}// each chunk's values summed by a shuffle scan and added to the running total in turn\n"
        f"{indent}for (int {chunk} = {start}; {chunk} < {bound}; {chunk} += {32 * chunks}) {{\n"
        f"{inner}{kind} {mine}[{chunks}];\n"
        f"{inner}#pragma unroll\n"
        f"{inner}for (int {g} = 0; {g} < {chunks}; ++{g}) {{\n"
        f"{inner}    const int {j} = {at_g};\n"
        f"{inner}    {mine}[{g}] = {j} < {bound} ? {converted} : ({kind})0;\n"
        f"{inner}}}\n"
        f"{inner}#pragma unroll\n"
        f"{inner}for (int {offset} = 1; {offset} < 32; {offset} <<= 1) {{\n"
        f"{inner}    #pragma unroll\n"
        f"{inner}    for (int {g} = 0; {g} < {chunks}; ++{g}) {{\n"
        f"{inner}        {kind} {n['other']} = __shfl_up_sync(0xffffffffu, {mine}[{g}], {offset});\n"
        f"{inner}        if ({lane} >= {offset}) {mine}[{g}] += {n['other']};\n"
        f"{inner}    }}\n"
        f"{inner}}}\n"
        f"{inner}#pragma unroll\n"
        f"{inner}for (int {g} = 0; {g} < {chunks}; ++{g}) {{\n"
        f"{deeper}const int {j} = {at_g};\n"
        f"{deeper}const bool {lane_in} = {j} < {bound};\n"
        f"{step}"
        f"{inner}}}\n"
        f"{indent}}}"
    )
    return (loop.node.start_byte, loop.node.end_byte, text_)


def _locals(tree: KernelTree, declarations: list[Node]) -> dict[str, str]:
    """The values of the loop's leading declarations (`float v = x[row * L + j];`), each converted to its
    type, to write where the update reads them: only pure ones, each of one initialised name."""
    values: dict[str, str] = {}
    for declaration in declarations:
        found = single_declaration(declaration, tree)
        if found is None or found[2] is None or not pure_declaration(tree, declaration) or "*" in found[0]:
            raise Unsupported("a declaration in the loop that is not one pure value")
        kind, name, value = found
        substituted = tree.substituted(
            value, lambda n: values.get(text(n)) if n.type == "identifier" else None
        )
        values[name] = f"(({kind})({substituted}))"
    return values


def _added(tree: KernelTree, statement: Node, total: str) -> Node:
    """v of `total += v;`, `total = total + v;` or `total = v + total;`."""
    expression = unwrap(statement.named_children[0]) if statement.named_children else None
    if statement.type != "expression_statement" or expression is None:
        raise Unsupported("the update is not a statement of its own")
    if expression.type != "assignment_expression":
        raise Unsupported("not an assignment")
    left, operator, right = (expression.child_by_field_name(f) for f in ("left", "operator", "right"))
    if left is None or operator is None or right is None or text(unwrap(left)) != total:
        raise Unsupported("not an update of the total")
    if operator.type == "+=":
        return right
    right = unwrap(right)
    op = right.child_by_field_name("operator")
    if operator.type == "=" and right.type == "binary_expression" and op is not None and op.type == "+":
        a, b = right.child_by_field_name("left"), right.child_by_field_name("right")
        assert a is not None and b is not None
        if text(unwrap(a)) == total:
            return b
        if text(unwrap(b)) == total:
            return a
    raise Unsupported("not a sum")


def _range(tree: KernelTree, loop: Loop) -> tuple[str, str]:
    """The loop's start and exclusive bound as written (`for (int j = s; j < n; ...)`)."""
    initializer, condition = (loop.node.child_by_field_name(f) for f in ("initializer", "condition"))
    if initializer is None or condition is None:
        raise Unsupported("a loop without an initializer or a condition")
    if initializer.type == "declaration":
        (declarator,) = initializer.children_by_field_name("declarator")
        start = declarator.child_by_field_name("value")
    else:
        start = unwrap(initializer).child_by_field_name("right")
    condition = unwrap(condition)
    op = condition.child_by_field_name("operator")
    left, right = condition.child_by_field_name("left"), condition.child_by_field_name("right")
    if start is None or op is None or op.type != "<" or left is None or right is None:
        raise Unsupported("not `j < bound`")
    if text(unwrap(left)) != loop.variable:
        raise Unsupported("the condition is not on the loop variable")
    return as_factor(tree.text(start)), as_factor(tree.text(right))


def _within(node: Node, parts: list[Node]) -> bool:
    return any(p.start_byte <= node.start_byte and node.end_byte <= p.end_byte for p in parts)
