"""Reductions recognised by their combine, however they are spelled.

Within one loop, every update of a local declared outside it is classified: `acc += v`, `acc = acc + v`,
`acc = v + acc`, `acc -= v`, `acc = __hadd(acc, v)` and `acc = fmaf(a, b, acc)` are sums; `*=` a
product; `acc = fmaxf(acc, v)`, `acc = max(v, acc)`, `acc = v > acc ? v : acc` and `if (v > acc) acc =
v;` a max (min alike); `if (v > best) { best = v; at = k; }` an argmax keeping the first position (`>=`:
the last); `|=`, `&=`, `^=` bitwise folds. An update that is none of these, or an accumulator read
elsewhere in the loop, makes the local carried: the loop's iterations then depend on each other. A
running maximum and a sum of exponentials rescaled whenever the maximum grows (`if (v > m) { s *= expf(m
- v); m = v; } s += expf(v - m);`, or through `m_new = fmaxf(m, v)`, or `if (v > m) { m = v; s = s *
expf(m_prev - m) + expf(v - m); } else s += expf(v - m);` with `m_prev` a copy of m) is the online
softmax's normaliser: a logsumexp of the pair.
"""

from __future__ import annotations

from dataclasses import dataclass

from cuda_agent.agent.analysis.facts import (
    AND,
    ARGMAX,
    ARGMIN,
    FIND_FIRST,
    LOGSUMEXP,
    MAX,
    MIN,
    OR,
    PRODUCT,
    SUM,
    XOR,
    Reduction,
)
from cuda_agent.agent.analysis.values import text, unwrap
from cuda_agent.agent.proposers.tree import walk_with_comments as _nodes
from tree_sitter import Node

_FUNCTIONS = {"fmaxf": MAX, "fmax": MAX, "max": MAX, "fminf": MIN, "fmin": MIN, "min": MIN}
_FUNCTIONS |= {"__hmax": MAX, "__hmin": MIN, "std::max": MAX, "std::min": MIN}
# Arithmetic spelled as calls: `acc = __hadd(acc, v)` is `acc += v`, `acc = fmaf(a, b, acc)` is
# `acc += a * b` (one rounding instead of two: the compiler contracts `acc += a * b` into the same FMA).
ADDS = frozenset({"__hadd", "__fadd_rn", "__dadd_rn"})
MULTIPLIES = frozenset({"__hmul", "__fmul_rn", "__dmul_rn"})
FUSED_MULTIPLY_ADDS = frozenset({"fmaf", "fma", "__fmaf_rn", "__fma_rn", "__hfma"})
_COMPOUND = {"+=": SUM, "-=": SUM, "*=": PRODUCT, "|=": OR, "&=": AND, "^=": XOR}
_BINARY = {"+": SUM, "*": PRODUCT, "|": OR, "&": AND, "^": XOR}
# `v > acc` keeps the larger: (combine when the new value is on the left, when it is on the right)
_COMPARISONS = {">": (MAX, MIN), ">=": (MAX, MIN), "<": (MIN, MAX), "<=": (MIN, MAX)}


@dataclass(frozen=True)
class Found:
    reductions: tuple[Reduction, ...]
    carried: frozenset[str]


def classify(body: Node, outer: set[str], loop: str) -> Found:
    """The reductions and carried locals among the updates of `outer` names inside the loop's body."""
    updates: dict[str, list[Node]] = {}
    counters = _restarted_counters(body)
    for node in _nodes(body):
        target = _assigned_name(node)
        if target is not None and target in outer and _span(node) not in counters.get(target, set()):
            updates.setdefault(target, []).append(node)
    reductions: list[Reduction] = []
    carried: set[str] = set()
    claimed: set[str] = set()
    search = _find_first(body, outer, loop)
    if search is not None and len(updates.get(search.accumulators[0], [])) == 1:
        reductions.append(search)
        claimed.add(search.accumulators[0])
    for name, nodes in updates.items():
        if name in claimed:
            continue
        found = _argmax(nodes[0], name, loop, outer)
        if found is not None and found.accumulators[1] not in claimed:
            pair_nodes = updates.get(found.accumulators[1], [])
            if len(nodes) == 1 and len(pair_nodes) == 1 and _reads_only_in(body, found):
                reductions.append(found)
                claimed.update(found.accumulators)
                continue
        single = [_single(n, name) for n in nodes]
        combines = {r.combine for r in single if r is not None}
        if None in single or len(combines) != 1:
            carried.add(name)
            continue
        first = single[0]
        assert first is not None
        reduction = Reduction(first.combine, (name,), loop, tuple(nodes), first.combiner)
        if _reads_only_in(body, reduction):
            reductions.append(reduction)
            claimed.add(name)
        else:
            carried.add(name)
    for pair in _online_softmax(body, updates, carried, loop):
        reductions.append(pair)
        carried -= set(pair.accumulators)
    return Found(tuple(reductions), frozenset(carried - claimed))


def _find_first(body: Node, outer: set[str], loop: str) -> Reduction | None:
    """`for (...) { [declarations] if (cond) { at = k; break; } }`: the first position where cond holds."""
    statements = (
        [s for s in body.named_children if s.type != "comment"]
        if body.type == "compound_statement"
        else [body]
    )
    if not statements or any(s.type != "declaration" for s in statements[:-1]):
        return None
    guard = statements[-1]
    consequence = guard.child_by_field_name("consequence") if guard.type == "if_statement" else None
    if consequence is None or guard.child_by_field_name("alternative") is not None:
        return None
    inner = (
        [s for s in consequence.named_children if s.type != "comment"]
        if consequence.type == "compound_statement"
        else []
    )
    if len(inner) != 2 or inner[0].type != "expression_statement" or inner[1].type != "break_statement":
        return None
    assignment = unwrap(inner[0].named_children[0]) if inner[0].named_children else None
    name = _assigned_name(assignment) if assignment is not None else None
    operator = assignment.child_by_field_name("operator") if assignment is not None else None
    right = assignment.child_by_field_name("right") if assignment is not None else None
    if name is None or name not in outer or operator is None or operator.type != "=" or right is None:
        return None
    if loop not in {text(n) for n in _nodes(right) if n.type == "identifier"} or _mentions(guard, name) > 1:
        return None
    return Reduction(FIND_FIRST, (name,), loop, (guard,), "first")


_EXPONENTIALS = frozenset({"expf", "__expf", "exp", "hexp"})


def _online_softmax(
    body: Node, updates: dict[str, list[Node]], carried: set[str], loop: str
) -> list[Reduction]:
    """Pairs (m, s) of carried locals that are a running maximum and a rescaled sum of exponentials."""
    found: list[Reduction] = []
    for m in sorted(carried):
        for s in sorted(carried - {m}):
            if any(m in r.accumulators or s in r.accumulators for r in found):
                continue
            helper = _fresh_maximum(body, m)
            if not all(_raises_maximum(n, m, helper) for n in updates[m]):
                continue
            exponentials = [_rescaled_sum(n, s) for n in updates[s]]
            if not exponentials or None in exponentials:
                continue
            statements = (*updates[m], *updates[s])
            reduction = Reduction(LOGSUMEXP, (m, s), loop, statements, next(e for e in exponentials if e))
            allowed = [*statements, *(_enclosing_condition(n) for n in statements)]
            if helper is not None:
                allowed.append(helper)
            allowed += _copies(body, m)
            if _reads_only_within(body, (m, s), allowed):
                found.append(reduction)
    return found


def _fresh_maximum(body: Node, m: str) -> Node | None:
    """`float m_new = fmaxf(m, v);` in the loop body: the declaration, if there is one."""
    for node in _nodes(body):
        if node.type != "init_declarator":
            continue
        value = node.child_by_field_name("value")
        if value is not None and _max_of(unwrap(value), m):
            return node
    return None


def _copies(body: Node, m: str) -> list[Node]:
    """`float m_prev = m;` in the loop body: the maximum before this element, for the rescale."""
    return [
        node
        for node in _nodes(body)
        if node.type == "init_declarator"
        and (value := node.child_by_field_name("value")) is not None
        and _is(value, m)
    ]


def _max_of(node: Node, m: str) -> bool:
    if node.type != "call_expression":
        return False
    function, arguments = node.child_by_field_name("function"), node.child_by_field_name("arguments")
    args = [c for c in arguments.named_children if c.type != "comment"] if arguments else []
    return (
        function is not None
        and _FUNCTIONS.get(text(function)) == MAX
        and len(args) == 2
        and any(_is(a, m) for a in args)
    )


def _raises_maximum(node: Node, m: str, helper: Node | None) -> bool:
    """`m = v` under `if (v > m)`, `m = fmaxf(m, v)`, or `m = m_new` with m_new that maximum."""
    single = _single(node, m)
    if single is not None and single.combine == MAX:
        return True
    right = node.child_by_field_name("right") if node.type == "assignment_expression" else None
    name = helper.child_by_field_name("declarator") if helper is not None else None
    return right is not None and name is not None and _is(right, text(name))


def _rescaled_sum(node: Node, s: str) -> str | None:
    """The exponential's name when the update is `s *= exp(..)`, `s += exp(..)`, `s = s * exp(..) [+
    exp(..)]`; None for anything else."""
    if node.type != "assignment_expression":
        return None
    operator, right = node.child_by_field_name("operator"), node.child_by_field_name("right")
    if operator is None or right is None:
        return None
    right = unwrap(right)
    if operator.type in ("*=", "+="):
        return exponential(right)
    if operator.type != "=" or right.type != "binary_expression":
        return None
    op, a, b = (right.child_by_field_name(f) for f in ("operator", "left", "right"))
    if op is None or a is None or b is None:
        return None
    if op.type == "+":
        scaled, added = unwrap(a), exponential(unwrap(b))
        if added is None:
            return None
        return added if _scaled(scaled, s) else None
    return exponential(unwrap(b)) if op.type == "*" and _is(a, s) else None


def _scaled(node: Node, s: str) -> bool:
    op, a, b = (node.child_by_field_name(f) for f in ("operator", "left", "right"))
    return (
        node.type == "binary_expression"
        and op is not None
        and op.type == "*"
        and a is not None
        and b is not None
        and (
            (_is(a, s) and exponential(unwrap(b)) is not None)
            or (_is(b, s) and exponential(unwrap(a)) is not None)
        )
    )


def exponential(node: Node) -> str | None:
    """The function's name when the node is a call of an exponential (`expf(...)`, `__expf`, `hexp`)."""
    function = node.child_by_field_name("function") if node.type == "call_expression" else None
    name = text(function) if function is not None else ""
    return name if name in _EXPONENTIALS else None


def _enclosing_condition(node: Node) -> Node | None:
    statement = node.parent
    guard = _enclosing_if(statement)
    return guard.child_by_field_name("condition") if guard is not None else None


def _reads_only_within(body: Node, names: tuple[str, ...], allowed: list[Node | None]) -> bool:
    spans = [(n.start_byte, n.end_byte) for n in allowed if n is not None]
    return all(
        any(a <= node.start_byte and node.end_byte <= b for a, b in spans)
        for node in _nodes(body)
        if node.type == "identifier" and text(node) in names
    )


def _restarted_counters(body: Node) -> dict[str, set[tuple[int, int]]]:
    """The counters of loops nested in the body that their own `for` sets before anything reads them
    (`int j, k; for (j = 0; ...) for (k = 0; k < n; ++k)`): name -> the spans of the initialiser and the
    update, which carry nothing from one iteration of the outer loop to the next."""
    nodes = list(_nodes(body))
    first_seen: dict[str, int] = {}  # where each name first appears
    assigned: dict[str, set[tuple[int, int]]] = {}  # every assignment or update of each name
    for node in nodes:
        if node.type == "identifier":
            first_seen.setdefault(text(node), node.start_byte)
        if (name := _assigned_name(node)) is not None:
            assigned.setdefault(name, set()).add(_span(node))
    found: dict[str, set[tuple[int, int]]] = {}
    for node in nodes:
        initializer = node.child_by_field_name("initializer") if node.type == "for_statement" else None
        if initializer is None or unwrap(initializer).type != "assignment_expression":
            continue
        name = _assigned_name(unwrap(initializer))
        if name is None or first_seen.get(name, node.start_byte) < node.start_byte:
            continue
        found.setdefault(name, set()).add(_span(unwrap(initializer)))
        update = node.child_by_field_name("update")
        if update is not None and _assigned_name(unwrap(update)) == name:
            found[name].add(_span(unwrap(update)))
    # assigned anywhere else in the body too: carried after all
    return {name: spans for name, spans in found.items() if assigned.get(name, set()) <= spans}


def _span(node: Node) -> tuple[int, int]:
    return node.start_byte, node.end_byte


def _assigned_name(node: Node) -> str | None:
    if node.type == "assignment_expression":
        left = node.child_by_field_name("left")
        left = unwrap(left) if left is not None else None
        return text(left) if left is not None and left.type == "identifier" else None
    if node.type == "update_expression":
        argument = node.child_by_field_name("argument")
        argument = unwrap(argument) if argument is not None else None
        return text(argument) if argument is not None and argument.type == "identifier" else None
    return None


@dataclass(frozen=True)
class _Single:
    combine: str
    combiner: str


def _single(node: Node, name: str) -> _Single | None:
    """The combine of one update of `name` (an assignment or ++), if it folds a value into it."""
    if node.type == "update_expression":
        operator = node.child_by_field_name("operator")
        return _Single(SUM, "+") if operator is not None and operator.type in ("++", "--") else None
    operator, right = node.child_by_field_name("operator"), node.child_by_field_name("right")
    if operator is None or right is None:
        return None
    if operator.type in _COMPOUND:
        if _mentions(right, name):
            return None
        return _Single(_COMPOUND[operator.type], operator.type[0] if operator.type != "-=" else "+")
    if operator.type != "=":
        return None
    right = unwrap(right)
    if right.type == "binary_expression":
        op, a, b = (right.child_by_field_name(f) for f in ("operator", "left", "right"))
        if op is None or a is None or b is None or op.type not in _BINARY:
            return None
        for mine, other in ((a, b), (b, a)):
            if _is(mine, name) and not _mentions(other, name):
                return _Single(_BINARY[op.type], op.type)
        if op.type == "+" and a.type == "binary_expression":  # acc = acc + x + y
            inner = _single_sum(a, name)
            if inner and not _mentions(b, name):
                return _Single(SUM, "+")
        return None
    if right.type == "call_expression":
        function, arguments = right.child_by_field_name("function"), right.child_by_field_name("arguments")
        name_of = text(function) if function is not None else ""
        args = [c for c in arguments.named_children if c.type != "comment"] if arguments else []
        if (name_of in _FUNCTIONS or name_of in ADDS) and len(args) == 2:
            # an add's partials combine with `+`, a max's with the function the user called
            single = _Single(SUM, "+") if name_of in ADDS else _Single(_FUNCTIONS[name_of], name_of)
            for mine, other in ((args[0], args[1]), (args[1], args[0])):
                if _is(mine, name) and not _mentions(other, name):
                    return single
        fused = name_of in FUSED_MULTIPLY_ADDS and len(args) == 3
        if fused and _is(args[2], name) and not (_mentions(args[0], name) or _mentions(args[1], name)):
            return _Single(SUM, "+")
        if _mentions(right, name):
            return None
        # else a value read through a macro or a helper (`if (LOGIT(b, v) > m) m = LOGIT(b, v);`): below
    if right.type == "conditional_expression":
        combine = _select(right, name)
        return _Single(combine, "?:") if combine is not None else None
    # `if (v > acc) acc = v;`: a plain assignment of the compared value under a comparison with acc
    statement = node.parent
    guard = _enclosing_if(statement)
    if guard is not None:
        combine = _comparison(guard, name, right)
        if combine is not None:
            return _Single(combine, "if")
    return None


def _single_sum(node: Node, name: str) -> bool:
    node = unwrap(node)
    if node.type != "binary_expression":
        return _is(node, name)
    op, a, b = (node.child_by_field_name(f) for f in ("operator", "left", "right"))
    if op is None or a is None or b is None or op.type != "+":
        return False
    return (_single_sum(a, name) and not _mentions(b, name)) or (_is(b, name) and not _mentions(a, name))


def _select(conditional: Node, name: str) -> str | None:
    """`v > acc ? v : acc` (any order of the comparison and the arms) -> MAX or MIN."""
    condition, yes, no = (
        conditional.child_by_field_name(f) for f in ("condition", "consequence", "alternative")
    )
    if condition is None or yes is None or no is None:
        return None
    parts = _compared(unwrap(condition))
    if parts is None:
        return None
    op, a, b = parts
    if _is(no, name) and text(unwrap(yes)) == text(unwrap(a)) and _is(b, name):
        return _COMPARISONS[op.type][0]  # v > acc ? v : acc
    if _is(no, name) and text(unwrap(yes)) == text(unwrap(b)) and _is(a, name):
        return _COMPARISONS[op.type][1]  # acc > v ? v : acc keeps the smaller
    if _is(yes, name) and text(unwrap(no)) == text(unwrap(b)) and _is(a, name):
        return _COMPARISONS[op.type][0]  # acc > v ? acc : v
    if _is(yes, name) and text(unwrap(no)) == text(unwrap(a)) and _is(b, name):
        return _COMPARISONS[op.type][1]  # v > acc ? acc : v
    return None


def _compared(condition: Node) -> tuple[Node, Node, Node] | None:
    """(operator, left, right) of `a > b` and the other orderings; None for anything else."""
    op, a, b = (condition.child_by_field_name(f) for f in ("operator", "left", "right"))
    if condition.type != "binary_expression" or op is None or a is None or b is None:
        return None
    return (op, a, b) if op.type in _COMPARISONS else None


def _enclosing_if(statement: Node | None) -> Node | None:
    """The if statement whose (braced or bare) consequence holds this expression statement; an else
    branch does not change what the consequence does when the condition holds."""
    node = statement.parent if statement is not None else None
    child = statement
    if node is not None and node.type == "compound_statement":
        node, child = node.parent, node
    if node is not None and node.type == "if_statement" and child == node.child_by_field_name("consequence"):
        return node
    return None


def _comparison(guard: Node, name: str, value: Node) -> str | None:
    """The combine of `if (value > name) name = value;` and its spellings."""
    condition = guard.child_by_field_name("condition")
    if condition is None or not condition.named_children:
        return None
    parts = _compared(unwrap(condition.named_children[0]))
    if parts is None:
        return None
    op, a, b = parts
    if _is(b, name) and text(unwrap(a)) == text(value):
        return _COMPARISONS[op.type][0]
    if _is(a, name) and text(unwrap(b)) == text(value):
        return _COMPARISONS[op.type][1]
    return None


def _argmax(node: Node, name: str, loop: str, outer: set[str]) -> Reduction | None:
    """`if (v > best) { best = v; at = <loop variable>; }` -> an argmax of (best, at)."""
    if node.type != "assignment_expression":
        return None
    operator, right = node.child_by_field_name("operator"), node.child_by_field_name("right")
    if operator is None or operator.type != "=" or right is None:
        return None
    guard = _enclosing_if(node.parent)
    if guard is None:
        return None
    consequence = guard.child_by_field_name("consequence")
    if consequence is None or consequence.type != "compound_statement":
        return None
    statements = [s for s in consequence.named_children if s.type != "comment"]
    if len(statements) != 2 or not all(s.type == "expression_statement" for s in statements):
        return None
    assignments = [s.named_children[0] for s in statements]
    names = [_assigned_name(a) for a in assignments]
    if name not in names or any(n is None or n not in outer for n in names):
        return None
    other = next(n for n in names if n != name)
    index = assignments[names.index(other)]
    index_value = index.child_by_field_name("right")
    if index_value is None or loop not in {text(n) for n in _nodes(index_value) if n.type == "identifier"}:
        return None
    combine = _comparison(guard, name, unwrap(right))
    if combine is None:
        return None
    condition = guard.child_by_field_name("condition")
    assert condition is not None
    strict = any(c.type in (">", "<") for c in _nodes(condition))
    kind = ARGMAX if combine == MAX else ARGMIN
    return Reduction(kind, (name, other), loop, (guard,), ">" if kind == ARGMAX else "<", first=strict)


def _reads_only_in(body: Node, reduction: Reduction) -> bool:
    """Whether the accumulators are read nowhere in the loop but in their own updates."""
    inside = {(n.start_byte, n.end_byte) for s in reduction.statements for n in _nodes(s)}
    if reduction.combine in (MAX, MIN) and any(
        s.type == "assignment_expression" for s in reduction.statements
    ):
        for statement in reduction.statements:  # the guarding comparison of `if (v > m) m = v;` reads m
            guard = _enclosing_if(statement.parent)
            if guard is not None:
                condition = guard.child_by_field_name("condition")
                if condition is not None:
                    inside |= {(n.start_byte, n.end_byte) for n in _nodes(condition)}
    return not any(
        node.type == "identifier"
        and text(node) in reduction.accumulators
        and (node.start_byte, node.end_byte) not in inside
        for node in _nodes(body)
    )


def _is(node: Node, name: str) -> bool:
    node = unwrap(node)
    return node.type == "identifier" and text(node) == name


def _mentions(node: Node, name: str) -> int:
    """How many times the node reads or writes the name (0: not at all)."""
    return sum(1 for n in _nodes(node) if n.type == "identifier" and text(n) == name)
