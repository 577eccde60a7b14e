"""Two passes over the same values, the second reading the first's maximum -> one pass.

Driven by the analysis: a loop that reduces values to their maximum (or minimum), followed by a loop over
the same range that reads the same values again and uses that maximum only through them, is fused
where the pair is one known reduction:
- a sum of `exp(v - max)` is the online softmax's normaliser: the sum is rescaled whenever the maximum
  grows (`cross-entropy`, `softmax`, `logsumexp` written in two passes);
- the first position where `v == max` is an argmax keeping the first position (`argmin` alike): the
  greedy decoder's "find the largest logit, then find where it is".
The values are then read once instead of twice, and the fused loop is an ordinary reduction that the
lane and block splits (`warp_per_output`) take further. Between the two loops only copies of the
maximum and the second loop's starting values may stand; the latter move above the first loop.
"""

from __future__ import annotations

from dataclasses import dataclass

from cuda_agent.agent.analysis import KernelFacts, analysed
from cuda_agent.agent.analysis.facts import FIND_FIRST, MAX, MIN, SUM, Loop, Reduction
from cuda_agent.agent.analysis.forms import Form
from cuda_agent.agent.analysis.reductions import exponential
from cuda_agent.agent.analysis.values import text, unwrap
from cuda_agent.agent.candidates import Candidate
from cuda_agent.agent.proposers.rewrites._combine import declared_type
from cuda_agent.agent.proposers.tree import (
    Edit,
    KernelTree,
    candidate_from,
    declarator_name,
    fresh_names,
    identifiers_in,
    statements,
    walk,
)
from cuda_agent.agent.targets import KernelTarget
from tree_sitter import Node

PROPOSER = "rewrite:fuse-passes"
# Starting values whose move above the first loop changes nothing: numbers and constants (`-INFINITY`).
_CONSTANT_NODES = frozenset({"number_literal", "true", "false", "null", "unary_expression"})


class _Unsupported(Exception):
    """The two loops are not a pair this rewrite fuses; the message says why (for debugging)."""


@dataclass(frozen=True)
class _First:
    loop: Loop
    extreme: str  # the accumulator holding the maximum (minimum)
    combine: str  # MAX or MIN
    value: Node  # the value folded in, as the first loop spells it


def propose(target: KernelTarget) -> list[Candidate]:
    found = analysed(target)
    if found is None:
        return []
    tree, facts = found
    if facts.barriers or facts.atomics:
        return []
    top = [loop for loop in facts.loops if loop.depth == 0]
    for index, loop in enumerate(top):
        first = _first_pass(tree, facts, loop)
        if first is None:
            continue
        for second in top[index + 1 :]:
            try:
                edits, what, assumption = _fused(tree, facts, first, second)
            except _Unsupported:
                continue
            return [
                candidate_from(
                    target,
                    tree.apply_to_file(edits),
                    description=f"{what} over {loop.variable} in one pass instead of two",
                    proposer=PROPOSER,
                    assumptions=(assumption,),
                )
            ]
    return []


def _first_pass(tree: KernelTree, facts: KernelFacts, loop: Loop) -> _First | None:
    """A loop whose only work is folding one value into a maximum (minimum), reading without writing."""
    if loop.carried or len(loop.reductions) != 1 or _writes(facts, loop):
        return None
    (reduction,) = loop.reductions
    if reduction.combine not in (MAX, MIN):
        return None
    body = [s for s in statements(loop.body) if s.type != "declaration"]
    if len(body) != 1:
        return None
    value = _folded_value(reduction)
    return _First(loop, reduction.accumulators[0], reduction.combine, value) if value is not None else None


def _folded_value(reduction: Reduction) -> Node | None:
    """`v` of `m = fmaxf(m, v)`, `m = v > m ? v : m` or `if (v > m) m = v;`."""
    (node,) = reduction.statements
    right = node.child_by_field_name("right") if node.type == "assignment_expression" else None
    if right is None:
        return None
    right = unwrap(right)
    name = reduction.accumulators[0]
    if right.type == "call_expression":
        arguments = right.child_by_field_name("arguments")
        args = [a for a in arguments.named_children if a.type != "comment"] if arguments else []
        others = [a for a in args if not _is(a, name)]
        return others[0] if len(args) == 2 and len(others) == 1 else None
    if right.type == "conditional_expression":
        arms = [right.child_by_field_name(f) for f in ("consequence", "alternative")]
        others = [a for a in arms if a is not None and not _is(a, name)]
        return others[0] if len(others) == 1 else None
    return right  # the guarded assignment: the value assigned


def _fused(tree: KernelTree, facts: KernelFacts, first: _First, second: Loop) -> tuple[list[Edit], str, str]:
    loop = first.loop
    if (second.bound, second.step) != (loop.bound, loop.step) or second.step != Form.constant(1):
        raise _Unsupported("not the same range")
    # `m = x[0]; for (i = 1; ...)`: the first value is the maximum's start, the second loop's too
    from_first = loop.start == second.start + Form.constant(1)
    if loop.start != second.start and not from_first:
        raise _Unsupported("not the same range")
    if second.carried or len(second.reductions) != 1 or _writes(facts, second):
        raise _Unsupported("the second loop does more than one reduction")
    (reduction,) = second.reductions
    between, before, outer = _between(tree, loop, second)
    aliases, hoisted, parameters = _classified(between, before, outer, first.extreme, reduction)
    declared_between = {_declared_name(s) for s in (*between, *before) if s.type == "declaration"}
    read = {text(n) for n in walk(second.node) if n.type == "identifier"}
    if read & (declared_between - aliases - set(reduction.accumulators) - parameters):
        raise _Unsupported("the second loop reads what is computed between the loops")
    if len(statements(second.body)) != 1:
        raise _Unsupported("the second loop does more than its update")
    (statement,) = statements(second.body)
    same = _SameValue(tree, facts, first, second, aliases)
    if from_first and not same.starts_at(second.start):
        raise _Unsupported("the maximum does not start at the first value")
    kind = declared_type(tree, first.extreme) or "float"
    taken = tree.names()
    (v,) = fresh_names(taken, "v")
    m = first.extreme
    prologue: list[str] = []  # run just before the fused loop
    if reduction.combine == FIND_FIRST:
        at = _found_position(tree, statement, reduction, same)
        if identifiers_in(tree, at) & parameters:
            raise _Unsupported("the position reads a local of the second loop's block")
        better = ">" if first.combine == MAX else "<"
        body = [f"{kind} {v} = {tree.text(first.value)};", f"if ({v} {better} {m}) {{", f"{m} = {v};"]
        body += [f"{reduction.accumulators[0]} = {at};", "}"]
        if from_first:  # where nothing passes the first value, its position is the answer
            start = _found_position(tree, statement, reduction, same, second.start)
            prologue = [f"{reduction.accumulators[0]} = {start};"]
        what = f"the {'largest' if first.combine == MAX else 'smallest'} value and its first position"
        assumption = f"some value passes {m}'s start (else the position keeps its own start)"
    elif reduction.combine == SUM and first.combine == MAX:
        exp = _exponential_of_shift(statement, reduction, same)
        s = reduction.accumulators[0]
        body = [f"{kind} {v} = {tree.text(first.value)};", f"if ({v} > {m}) {{", f"{s} *= {exp}({m} - {v});"]
        body += [f"{m} = {v};", "}", f"{s} += {exp}({v} - {m});"]
        if from_first:
            prologue = [f"{s} += 1.0f;  // the first value's exp(v - max), the maximum being that value"]
        what = "the maximum and the sum of exponentials"
        assumption = f"the sum into {s} is rescaled as the maximum grows (within the spec's tolerance)"
    else:
        raise _Unsupported("no one-pass form of this pair")
    return _edits(tree, first, second, body, prologue, hoisted, outer), what, assumption


def _writes(facts: KernelFacts, loop: Loop) -> bool:
    return any(a.write for a in facts.accesses_in(loop)) or any(
        loop.node.start_byte <= n.start_byte < loop.node.end_byte for n in facts.unmodelled
    )


def _between(tree: KernelTree, first: Loop, second: Loop) -> tuple[list[Node], list[Node], Node]:
    """(the statements run between the loops in the block that holds both, or after the first within
    its own plain `{ }` blocks; those run before the second within its own plain blocks: a helper's
    parameters written out; the statement of the common block that holds the first loop)."""
    firsts, seconds = _plain_blocks(first.node), _plain_blocks(second.node)
    common = next((b for b, _ in firsts if any(b == c for c, _ in seconds)), None)
    if common is None:
        raise _Unsupported("the loops are in unrelated blocks")
    outer = next(child for b, child in firsts if b == common)
    inner = next(child for b, child in seconds if b == common)
    if outer.end_byte > inner.start_byte:
        raise _Unsupported("the second loop is not after the first")
    after: list[Node] = []
    for block, child in firsts:
        if block == common:
            break
        after += [s for s in statements(block) if s.start_byte > child.start_byte]
    after += [s for s in statements(common) if outer.end_byte <= s.start_byte < inner.start_byte]
    before: list[Node] = []
    for block, child in seconds:
        if block == common:
            break
        before = [s for s in statements(block) if s.end_byte <= child.start_byte] + before
    return after, before, outer


def _plain_blocks(node: Node) -> list[tuple[Node, Node]]:
    """(block, its statement that holds the node) for each `{ }` around the node, innermost first, up to
    the first that is not a plain block inside another (a function's body, a branch, a loop)."""
    found = []
    while node.parent is not None and node.parent.type == "compound_statement":
        found.append((node.parent, node))
        node = node.parent
    return found


def _classified(
    between: list[Node], before: list[Node], outer: Node, extreme: str, reduction: Reduction
) -> tuple[set[str], list[Node], set[str]]:
    """(the names holding a copy of the maximum, the second loop's starting values to move above the
    first loop, the locals the second loop's own block declares from earlier values: a written-out
    helper's parameters, which stay where they are)."""
    aliases, hoisted, parameters = {extreme}, [], set()
    accumulators = set(reduction.accumulators)
    declared = set()
    for statement in (*between, *before):
        if any(n.type in ("call_expression", "update_expression") for n in walk(statement)):
            raise _Unsupported("a call or an update between the loops")
        names = {text(n) for n in walk(statement) if n.type == "identifier"}
        name = _declared_name(statement) if statement.type == "declaration" else None
        copy = _copy(statement)
        if name in accumulators and _constant_start(statement):
            if statement.parent != outer.parent and statement not in before:
                raise _Unsupported("the second loop's start is declared in the first's block")
            hoisted.append(statement)
        elif names & accumulators:
            raise _Unsupported("a statement between the loops reads or sets the second loop's result")
        elif copy is not None and copy[1] in aliases:
            aliases.add(copy[0])
        elif statement.type != "declaration":
            raise _Unsupported("a statement between the loops the fusion would reorder")
        elif statement in before and name is not None and not names & (declared | aliases):
            parameters.add(name)
        elif statement in before:
            raise _Unsupported("the second loop's block reads what is computed between the loops")
        if name is not None:
            declared.add(name)
    return aliases, hoisted, parameters


def _copy(statement: Node) -> tuple[str, str] | None:
    """(copy, original) of `T b = a;` or `b = a;`."""
    if statement.type == "declaration":
        declarators = statement.children_by_field_name("declarator")
        value = declarators[0].child_by_field_name("value") if len(declarators) == 1 else None
        name = declarators[0].child_by_field_name("declarator") if len(declarators) == 1 else None
        if (
            value is not None
            and name is not None
            and name.type == "identifier"
            and unwrap(value).type == "identifier"
        ):
            return text(name), text(unwrap(value))
        return None
    expression = unwrap(statement.named_children[0]) if statement.named_children else None
    if expression is None or expression.type != "assignment_expression":
        return None
    left, operator, right = (expression.child_by_field_name(f) for f in ("left", "operator", "right"))
    if left is None or right is None or operator is None or operator.type != "=":
        return None
    left, right = unwrap(left), unwrap(right)
    return (text(left), text(right)) if left.type == right.type == "identifier" else None


def _declared_name(declaration: Node) -> str | None:
    declarators = declaration.children_by_field_name("declarator")
    return declarator_name(declarators[0]) if len(declarators) == 1 else None


def _constant_start(declaration: Node) -> bool:
    (declarator,) = declaration.children_by_field_name("declarator")
    value = declarator.child_by_field_name("value")
    return value is None or all(
        n.type in _CONSTANT_NODES or not n.is_named or (n.type == "identifier" and text(n).isupper())
        for n in walk(unwrap(value))
    )


class _SameValue:
    """Whether an expression of the second loop is the first loop's value at the same iteration: every
    load the same element (the analysis's offsets, the loop variables identified), every other name
    the same, a copy of the maximum read as the maximum."""

    def __init__(self, tree: KernelTree, facts: KernelFacts, first: _First, second: Loop, aliases: set[str]):
        self.tree, self.first, self.second, self.aliases = tree, first, second, aliases
        self.places = {(a.node.start_byte, a.node.end_byte): a for a in facts.accesses if a.read}
        self.expected = self._normalised(first.value, first.loop.variable, None)

    def __call__(self, node: Node) -> bool:
        rename = Form.atom(self.first.loop.variable)
        return self._normalised(node, self.second.variable, rename) == self.expected

    def starts_at(self, start: Form) -> bool:
        """Whether the maximum's setting just before the first loop is the first value at `start`."""
        value = _start_value(self.tree, self.first)
        if value is None:
            return False
        at = self._normalised(self.first.value, self.first.loop.variable, start, rename_name=start.text())
        return self._normalised(value, "", None) == at

    def is_extreme(self, node: Node) -> bool:
        node = unwrap(node)
        return node.type == "identifier" and text(node) in self.aliases

    def _normalised(self, node: Node, variable: str, rename: Form | None, rename_name: str = "⟨k⟩") -> str:
        def substitute(child: Node) -> str | None:
            access = self.places.get((child.start_byte, child.end_byte))
            if access is not None:
                offset = access.offset if rename is None else access.offset.substitute(variable, rename)
                return f"⟨{access.array}@{offset.text()}⟩"
            if child.type == "identifier" and text(child) == variable:
                return rename_name
            return None

        return "".join(self.tree.substituted(unwrap(node), substitute).split())


def _found_position(
    tree: KernelTree, statement: Node, reduction: Reduction, same: _SameValue, at: Form | None = None
) -> str:
    """The position a `if (v == max) { at = k; break; }` search takes, in the first loop's variable (or
    at the position `at`)."""
    condition = statement.child_by_field_name("condition")
    compared = (
        unwrap(condition.named_children[0]) if condition is not None and condition.named_children else None
    )
    operator = compared.child_by_field_name("operator") if compared is not None else None
    if compared is None or operator is None or operator.type != "==":
        raise _Unsupported("the search is not for the maximum itself")
    left, right = compared.child_by_field_name("left"), compared.child_by_field_name("right")
    assert left is not None and right is not None
    if not ((same(left) and same.is_extreme(right)) or (same(right) and same.is_extreme(left))):
        raise _Unsupported("the search compares something else")
    consequence = statement.child_by_field_name("consequence")
    assert consequence is not None
    taken = next(s for s in statements(consequence) if s.type == "expression_statement")
    value = unwrap(taken.named_children[0]).child_by_field_name("right")
    assert value is not None
    if any(same.is_extreme(n) for n in walk(value)):
        raise _Unsupported("the position reads the maximum")
    old = same.second.variable
    new = same.first.loop.variable if at is None else f"({at.text()})" if len(at.terms) > 1 else at.text()
    return tree.substituted(value, lambda n: new if n.type == "identifier" and text(n) == old else None)


def _exponential_of_shift(statement: Node, reduction: Reduction, same: _SameValue) -> str:
    """The exponential's name when the sum's term is `exp(v - max)`, v the first loop's value."""
    (update,) = reduction.statements
    operator, right = update.child_by_field_name("operator"), update.child_by_field_name("right")
    if operator is None or right is None or operator.type != "+=" or update.parent != statement:
        raise _Unsupported("not `s += term`")
    call = unwrap(right)
    function = exponential(call)
    arguments = call.child_by_field_name("arguments")
    args = [a for a in arguments.named_children if a.type != "comment"] if arguments else []
    if function is None or len(args) != 1:
        raise _Unsupported("the term is not an exponential")
    shift = unwrap(args[0])
    operator = shift.child_by_field_name("operator") if shift.type == "binary_expression" else None
    left, right = shift.child_by_field_name("left"), shift.child_by_field_name("right")
    if operator is None or operator.type != "-" or left is None or right is None:
        raise _Unsupported("the exponential is not of a shifted value")
    if not (same(left) and same.is_extreme(right)):
        raise _Unsupported("the exponential is not of the value less the maximum")
    return function


def _edits(
    tree: KernelTree,
    first: _First,
    second: Loop,
    body: list[str],
    prologue: list[str],
    hoisted: list[Node],
    outer: Node,
) -> list[Edit]:
    """The first loop's body replaced by the fused one, the second loop and the moved starts deleted, the
    starts written above the statement that holds the first loop, the prologue just above the loop."""
    loop = first.loop
    indent = tree.indent_at(loop.node.start_byte)
    unit = tree.indent_unit()
    inner = indent + unit
    lines, depth = [], 0
    for line in body:
        depth -= line.startswith("}")
        lines.append(inner + unit * depth + line)
        depth += line.endswith("{")
    kept = [s for s in statements(loop.body) if s.type == "declaration"]
    new_body = "{\n" + "".join(inner + tree.text(s) + "\n" for s in kept) + "\n".join(lines) + f"\n{indent}}}"
    # a bare body on the next line gets its braces after the loop's header, as written by hand
    header_end = (
        loop.body.prev_sibling.end_byte if loop.body.prev_sibling is not None else loop.body.start_byte
    )
    start = loop.body.start_byte if loop.body.type == "compound_statement" else header_end
    edits: list[Edit] = [
        (start, loop.body.end_byte, new_body if start == loop.body.start_byte else " " + new_body)
    ]
    edits += [
        _deleted_line(tree, node) for node in (*hoisted, *_comments_above(tree, second.node), second.node)
    ]
    above = tree.indent_at(outer.start_byte)
    moved = "".join(tree.text(s) + f"\n{above}" for s in hoisted)
    ahead = "".join(line + f"\n{indent}" for line in prologue)
    if outer == loop.node:  # one insertion: two at the same byte would land in either order
        edits.append((outer.start_byte, outer.start_byte, moved + ahead))
    else:
        edits += [
            (outer.start_byte, outer.start_byte, moved),
            (loop.node.start_byte, loop.node.start_byte, ahead),
        ]
    return [e for e in edits if e[0] != e[1] or e[2]]


def _deleted_line(tree: KernelTree, node: Node) -> Edit:
    """The node with the whitespace before it on its line and the line break after it."""
    start = tree.data.rfind(b"\n", 0, node.start_byte) + 1 if tree.starts_line(node) else node.start_byte
    end = node.end_byte
    if tree.data[end : end + 1] == b"\n":
        end += 1
    return start, end, ""


def _start_value(tree: KernelTree, first: _First) -> Node | None:
    """The value the maximum is set to by the statement right before the first loop (`float m = x[0];`)."""
    previous = first.loop.node.prev_named_sibling
    while previous is not None and previous.type == "comment":
        previous = previous.prev_named_sibling
    if previous is None:
        return None
    if previous.type == "declaration" and _declared_name(previous) == first.extreme:
        (declarator,) = previous.children_by_field_name("declarator")
        return declarator.child_by_field_name("value")
    expression = unwrap(previous.named_children[0]) if previous.named_children else None
    if previous.type == "expression_statement" and expression is not None and _copy(previous) is None:
        left, right = expression.child_by_field_name("left"), expression.child_by_field_name("right")
        if expression.type == "assignment_expression" and left is not None and _is(left, first.extreme):
            return right
    return None


def _comments_above(tree: KernelTree, node: Node) -> list[Node]:
    """The comment lines right above a statement (what they say goes with it)."""
    found = []
    previous = node.prev_sibling
    while previous is not None and previous.type == "comment" and tree.starts_line(previous):
        if (
            tree.data[previous.end_byte : found[-1].start_byte if found else node.start_byte].count(b"\n")
            != 1
        ):
            break
        found.append(previous)
        previous = previous.prev_sibling
    return found


def _is(node: Node, name: str) -> bool:
    node = unwrap(node)
    return node.type == "identifier" and text(node) == name
