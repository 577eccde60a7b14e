"""An online softmax's normaliser -> its maximum first, then the sum of exponentials against it.

The one-pass form (`if (v > m) { s *= expf(m - v); m = v; } s += expf(v - m);`, in any of the
spellings agent/analysis/reductions.py recognises as a logsumexp pair) reads each element once but
carries a branch and a rescale through every step; split across a warp's lanes and widened to 16-byte
loads it stays about 15% slower on the H200 than the classic form, which reads the row once more (from
cache) for two plain reductions. Rewritten as that form: the loop runs twice with its own declarations
(the element's value and what it needs), first `m = fmaxf(m, v);`, then `s += expf(v - m);`, with the
user's exponential. Each lane (or thread) then holds the same pair the one-pass loop leaves, so any
code after the loop (a warp's merge of pairs included) reads what it did. `rewrite:warp-per-output`
then splits both plain loops across lanes; the search chains it.

Offered where the loop's body is, besides the pair's updates and the `if` statements holding them,
declarations that read neither the maximum nor the sum, copies of the maximum (`float before = m;`) and
a fresh maximum (`float mn = fmaxf(m, v);`); every update of the maximum takes one value; the sum starts
at zero and the maximum is a float or double.
"""

from __future__ import annotations

from cuda_agent.agent.analysis import KernelFacts, analysed, declared_values
from cuda_agent.agent.analysis.facts import LOGSUMEXP, Loop, Reduction
from cuda_agent.agent.analysis.values import unwrap
from cuda_agent.agent.candidates import Candidate
from cuda_agent.agent.proposers.rewrites._combine import declared_type
from cuda_agent.agent.proposers.tree import (
    KernelTree,
    apply_to_body,
    build_candidate,
    declarator_name,
    identifiers,
    identifiers_in,
    reindent,
    walk,
)
from cuda_agent.agent.targets import KernelTarget
from tree_sitter import Node

PROPOSER = "rewrite:max-then-sum"
_MAXIMA = {"float": "fmaxf", "double": "fmax"}
_ZEROS = frozenset({"0", "0.0", "0.0f", "0.f", "0.", "0.0F", "0f"})
_MAX_CALLS = frozenset({"fmaxf", "fmax", "max"})


class _Unsupported(Exception):
    """Not this shape, or the split would not compute the same pair; the message says why."""


def propose(target: KernelTarget) -> list[Candidate]:
    found = analysed(target)
    if found is None or target.spec is None:
        return []
    tree, facts = found
    for loop in facts.loops:
        pair = next((r for r in loop.reductions if r.combine == LOGSUMEXP), None)
        if pair is None:
            continue
        try:
            return [_rewrite(tree, facts, loop, pair)]
        except _Unsupported:
            continue
    return []


def _rewrite(tree: KernelTree, facts: KernelFacts, loop: Loop, pair: Reduction) -> Candidate:
    m, s = pair.accumulators
    maximum = _MAXIMA.get(declared_type(tree, m) or "")
    if maximum is None:
        raise _Unsupported("the maximum is not a float or a double")
    initial = declared_values(tree.body).get(s)
    if initial is None or tree.text(initial).strip() not in _ZEROS:
        raise _Unsupported("the sum does not start at zero")
    kept, value = _body(tree, loop, pair)
    exp = pair.combiner
    header = tree.data[loop.node.start_byte : loop.body.start_byte].decode("utf-8")
    indent = tree.indent_at(loop.node.start_byte)
    inner = indent + tree.indent_unit()
    declarations = [reindent(tree.text(d), tree.indent_at(d.start_byte), inner) for d in kept]

    def pass_of(update: str) -> str:
        return "\n".join([f"{header}{{", *declarations, f"{inner}{update}", f"{indent}}}"])

    text = "\n".join(
        [
            f"// the maximum of {m} first, then the sum of exponentials against it (two plain reductions)",
            f"{indent}{pass_of(f'{m} = {maximum}({m}, {value});')}",
            f"{indent}{pass_of(f'{s} += {exp}({value} - {m});')}",
        ]
    )
    body = apply_to_body(tree, [(loop.node.start_byte, loop.node.end_byte, text)])
    return build_candidate(
        tree,
        body=body,
        launch=tree.target.spec.launch,  # type: ignore[union-attr]
        description=(
            f"the maximum {m} over {loop.variable} first, then the sum {s} of exponentials against it, "
            "instead of one pass rescaling the sum as the maximum grows"
        ),
        proposer=PROPOSER,
        assumptions=(
            f"{s} sums the exponentials against the final maximum instead of rescaling them as it grows "
            "(rounding differs within the spec's tolerance)",
        ),
    )


def _body(tree: KernelTree, loop: Loop, pair: Reduction) -> tuple[list[Node], str]:
    """The declarations both passes keep, and the value the maximum takes (in the user's text)."""
    m, s = pair.accumulators
    body = loop.body
    statements = (
        [c for c in body.named_children if c.type != "comment"]
        if body.type == "compound_statement"
        else [body]
    )
    updates = {(n.start_byte, n.end_byte) for n in pair.statements}
    kept: list[Node] = []
    dropped: set[str] = set()
    fresh: dict[str, str] = {}  # `float mn = fmaxf(m, v);` -> {"mn": "v"}
    for statement in statements:
        names = identifiers(statement)
        if statement.type == "declaration":
            declared = [
                n for d in statement.children_by_field_name("declarator") if (n := declarator_name(d))
            ]
            if not names & {m, s, *dropped}:
                kept.append(statement)
                continue
            other = _fresh_maximum(tree, statement, m)
            if other is None and not _copy_of(tree, statement, m):
                raise _Unsupported(f"a declaration reading the pair: {tree.text(statement)}")
            if other is not None:
                fresh[declared[0]] = other
            dropped.update(declared)
            continue
        assignments = [n for n in walk(statement) if n.type in ("assignment_expression", "update_expression")]
        if not assignments or any((a.start_byte, a.end_byte) not in updates for a in assignments):
            raise _Unsupported(f"a statement besides the pair's updates: {tree.text(statement)}")
    values = {_value(tree, n, m, fresh) for n in pair.statements if _target(tree, n) == m}
    if len(values) != 1 or None in values:
        raise _Unsupported("the maximum's updates take different values")
    (value,) = values
    assert value is not None
    if identifiers_in(tree, value) & {m, s, *dropped}:
        raise _Unsupported("the value reads the pair")
    return kept, value


def _target(tree: KernelTree, node: Node) -> str | None:
    left = node.child_by_field_name("left") if node.type == "assignment_expression" else None
    return tree.text(unwrap(left)) if left is not None else None


def _value(tree: KernelTree, node: Node, m: str, fresh: dict[str, str]) -> str | None:
    """What `m = ...` makes the maximum: `v` of `m = v` (under `if (v > m)`), of `m = fmaxf(m, v)`, of
    `m = mn` with `mn = fmaxf(m, v)`."""
    operator, right = node.child_by_field_name("operator"), node.child_by_field_name("right")
    if operator is None or right is None or operator.type != "=":
        return None
    right = unwrap(right)
    if right.type == "identifier" and tree.text(right) in fresh:
        return fresh[tree.text(right)]
    other = _other_argument(tree, right, m)
    if other is not None:
        return other
    return _compared_value(tree, node, right, m)


def _other_argument(tree: KernelTree, call: Node, m: str) -> str | None:
    """`v` of `fmaxf(m, v)` (either order)."""
    function, arguments = call.child_by_field_name("function"), call.child_by_field_name("arguments")
    if call.type != "call_expression" or function is None or arguments is None:
        return None
    if tree.text(function) not in _MAX_CALLS:
        return None
    args = [a for a in arguments.named_children if a.type != "comment"]
    texts = [tree.text(unwrap(a)) for a in args]
    if len(texts) != 2 or m not in texts:
        return None
    return tree.text(args[1 - texts.index(m)])


def _compared_value(tree: KernelTree, node: Node, right: Node, m: str) -> str | None:
    """`v` of `m = v` inside the consequence of `if (v > m)` (or `m < v`)."""
    parent = node.parent
    while parent is not None and parent.type != "if_statement":
        parent = parent.parent
    if parent is None:
        return None
    condition = parent.child_by_field_name("condition")
    comparison = (
        unwrap(condition.named_children[0]) if condition is not None and condition.named_children else None
    )
    if comparison.type != "binary_expression":
        return None
    operator, a, b = (comparison.child_by_field_name(f) for f in ("operator", "left", "right"))
    if operator is None or a is None or b is None:
        return None
    value = tree.text(right)
    if operator.type in (">", ">=") and tree.text(unwrap(b)) == m and tree.text(unwrap(a)) == value:
        return value
    if operator.type in ("<", "<=") and tree.text(unwrap(a)) == m and tree.text(unwrap(b)) == value:
        return value
    return None


def _fresh_maximum(tree: KernelTree, declaration: Node, m: str) -> str | None:
    declarators = declaration.children_by_field_name("declarator")
    value = declarators[0].child_by_field_name("value") if len(declarators) == 1 else None
    return _other_argument(tree, unwrap(value), m) if value is not None else None


def _copy_of(tree: KernelTree, declaration: Node, m: str) -> bool:
    declarators = declaration.children_by_field_name("declarator")
    value = declarators[0].child_by_field_name("value") if len(declarators) == 1 else None
    return value is not None and tree.text(unwrap(value)) == m
