"""A bound the analysis found (a `Form` over the kernel's scalar parameters), written back out: in the
kernel's terms for the rewritten body, and in the spec's terms for the rewrite's launch grid; and the
way back, a spec expression (a grid) as C in the kernel's parameters (`in_kernel_terms`)."""

from __future__ import annotations

import ast

from cuda_agent.agent.analysis.facts import KernelFacts
from cuda_agent.agent.analysis.forms import Form
from cuda_agent.agent.proposers.tree import KernelTree, size_expression
from cuda_agent.agent.spec.expressions import ExpressionError, evaluate
from tree_sitter import Node


class NotInSizes(Exception):
    """The bound uses something other than scalar parameters with spec values and numbers."""


def spelled(form: Form, names: dict[str, str]) -> str:
    """The form as an expression that C and the spec both read (`B * T`, `n - 2`), atoms renamed."""
    parts = []
    for monomial, coefficient in sorted(form.terms.items(), key=lambda item: (-len(item[0]), item[0])):
        factors = [names.get(a, a) for a in monomial]
        if abs(coefficient) != 1 or not factors:
            factors.insert(0, str(abs(coefficient)))
        parts.append(("- " if coefficient < 0 else "+ ") + " * ".join(factors))
    if not parts:
        return "0"
    joined = " ".join(parts)
    return joined[2:] if joined.startswith("+ ") else "-" + joined[2:]


def bound_terms(tree: KernelTree, bound: Form) -> tuple[str, str]:
    """(the bound in the kernel's parameters, the same in the spec's sizes); compound ones parenthesised
    where they would be a factor (`(n - 2)`), plain ones bare (`rows`). A quotient or remainder of
    parameters (`hs = C / NH`) is written out as one."""
    parameters = {p.name for p in tree.target.kernel.parameters if not p.is_pointer}
    spec_names: dict[str, str] = {}
    kernel_names: dict[str, str] = {}

    def in_spec(atom: str) -> str:
        value = size_expression(tree, atom) if atom in parameters else None
        if value is None:
            raise NotInSizes(f"the bound {bound.text()} is not in the spec's sizes")
        inner = value[1:-1] if value.startswith("(") and value.endswith(")") else value
        return inner if inner.replace("_", "").isalnum() else value

    for atom in bound.atoms():
        split = _division(atom)
        if split is None:
            spec_names[atom] = in_spec(atom)
            continue
        numerator, operator, denominator = split
        words = {w for part in (numerator, denominator) for w in _names(part)}
        if not words <= parameters:
            raise NotInSizes(f"the bound {bound.text()} is not in the spec's sizes")
        kernel_names[atom] = f"({numerator} {operator} {denominator})"
        spec_parts = [_renamed(part, {w: in_spec(w) for w in words}) for part in (numerator, denominator)]
        spec_names[atom] = f"({spec_parts[0]} {'//' if operator == '/' else '%'} {spec_parts[1]})"
    return spelled(bound, kernel_names), spelled(bound, spec_names)


def _division(atom: str) -> tuple[str, str, str] | None:
    """`⟨(C) / (NH)⟩` -> ("(C)", "/", "(NH)"): an opaque quotient or remainder of two forms' texts."""
    if not (atom.startswith("⟨(") and atom.endswith(")⟩")):
        return None
    inner = atom[1:-1]
    for operator in ("/", "%"):
        parts = inner.split(f") {operator} (")
        if len(parts) == 2 and "⟨" not in inner:
            return f"{parts[0]})", operator, f"({parts[1]}"
    return None


def _names(text: str) -> set[str]:
    words = "".join(c if c.isalnum() or c == "_" else " " for c in text).split()
    return {w for w in words if not w[0].isdigit()}


def _renamed(text: str, names: dict[str, str]) -> str:
    out, word = [], ""
    for char in text + " ":
        if char.isalnum() or char == "_":
            word += char
            continue
        if word:
            out.append(names.get(word, word))
            word = ""
        out.append(char)
    return "".join(out[:-1])


def as_factor(expression: str) -> str:
    """`(n - 2)` for a sum, `n * 2` or `rows` as they are: ready to be multiplied or divided."""
    return f"({expression})" if any(op in expression for op in "+-/%") else expression


def as_operand(expression: str) -> str:
    """A name or a number as it is, anything else parenthesised: ready to divide by (`row / (2 * H)`,
    where `as_factor`'s `row / 2 * H` would be (row / 2) * H)."""
    return expression if expression.isidentifier() or expression.isdigit() else f"({expression})"


def at_benchmark(tree: KernelTree, form: Form) -> int | None:
    """The form's value at the spec's benchmark sizes (a loop's trip count there), or None where it is
    not made of sizes."""
    spec = tree.target.spec
    if spec is None:
        return None
    try:
        return evaluate(bound_terms(tree, form)[1], spec.sizes)
    except (NotInSizes, ExpressionError, ArithmeticError):
        return None


def in_kernel_terms(tree: KernelTree, expression: str) -> str:
    """A spec expression (a grid) as C in the kernel's parameters, the way back from `bound_terms`:
    `ceil_div(n, 256)` -> `((n + 256 - 1) / 256)`; NotInSizes where a name is no parameter's value."""
    names: dict[str, str] = {}
    for parameter in tree.target.kernel.parameters:
        value = size_expression(tree, parameter.name) if not parameter.is_pointer else None
        if value is not None and value[1:-1].isidentifier():
            names.setdefault(value[1:-1], parameter.name)
    try:
        parsed = ast.parse(expression, mode="eval").body
    except SyntaxError as exc:
        raise NotInSizes(f"the grid {expression} does not parse") from exc
    return _c(parsed, names)


def _c(node: ast.expr, names: dict[str, str]) -> str:
    if isinstance(node, ast.Constant) and isinstance(node.value, int):
        return str(node.value)
    if isinstance(node, ast.Name):
        if node.id not in names:
            raise NotInSizes(f"{node.id} is no parameter's value")
        return names[node.id]
    if isinstance(node, ast.BinOp):
        operators = {ast.Add: "+", ast.Sub: "-", ast.Mult: "*", ast.FloorDiv: "/", ast.Mod: "%"}
        operators |= {ast.LShift: "<<", ast.RShift: ">>"}
        operator = operators.get(type(node.op))
        if operator is None:
            raise NotInSizes("an operator the kernel cannot write")
        return f"({_c(node.left, names)} {operator} {_c(node.right, names)})"
    if (
        isinstance(node, ast.Call)
        and isinstance(node.func, ast.Name)
        and node.func.id in ("ceil_div", "cdiv")
        and len(node.args) == 2
    ):
        a, b = (_c(arg, names) for arg in node.args)
        return f"(({a} + {b} - 1) / {b})"
    raise NotInSizes("a grid the kernel cannot write")


def guarded_parts(tree: KernelTree, facts: KernelFacts) -> tuple[list[Node], str, list[Node]]:
    """(the statements before the bounds check, the check as a condition true in range, the statements it
    guards), for `if (i >= n) return; ...` and `if (i < n) { ... }` alike (the analysis takes no `else`)."""
    guard = facts.guard
    assert guard is not None
    top = [s for s in tree.body.named_children if s.type != "comment"]
    position = top.index(guard.statement)
    condition = guard.statement.child_by_field_name("condition")
    assert condition is not None and condition.named_children
    written = tree.text(condition.named_children[0])
    if guard.early_return:
        return top[:position], f"!({written})", top[position + 1 :]
    consequence = guard.statement.child_by_field_name("consequence")
    assert consequence is not None
    inner = [s for s in consequence.named_children if s.type != "comment"]
    return top[:position], written, inner if consequence.type == "compound_statement" else [consequence]
