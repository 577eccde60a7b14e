"""Host `kernel<<<grid, block, shared, stream>>>(...)` launches written for a new launch configuration.

A rewrite verified with a new launch (a warp per row, a capped grid, a tiled matmul's blocks) is only
correct in the user's program if the host launches it that way too. The spec's expressions are in terms
of its sizes; a launch site knows the values of the kernel's scalar parameters, so a size that a scalar
parameter carries (`n = { role = "scalar", value = "n" }`) is written as that call's argument. A size the
call does not carry (a constant of the spec, a count the kernel never sees) cannot be known at the site:
such a site is left as it was, and the caller says so.
"""

from __future__ import annotations

import ast
import operator
from collections.abc import Mapping

from cuda_agent.agent.kernels import Kernel, LaunchSite
from cuda_agent.agent.spec import KernelSpec, LaunchSpec


class NotExpressible(Exception):
    """The expression uses something the launch site cannot state (an unknown size, an operation)."""


def site_config(spec: KernelSpec, kernel: Kernel, launch: LaunchSpec, site: LaunchSite) -> str | None:
    """The new text between `<<<` and `>>>` for `site` (its stream kept), or None when the launch cannot
    be written in the site's terms."""
    sizes = _sizes_at(spec, kernel, site)
    block = {f"block.{axis}": str(launch.block[i]) if i < len(launch.block) else "1" for i, axis in
             enumerate("xyz")}  # fmt: skip
    try:
        grid = [_bare(_cpp(dim, sizes, block)) for dim in launch.grid]
        written = str(launch.shared_bytes).strip()
        shared = _bare(_cpp(written, sizes, block)) if written != "0" else ""
    except NotExpressible:
        return None
    parts = [_dims(grid), _dims([str(b) for b in launch.block])]
    stream = site.config[3].strip() if len(site.config) > 3 else ""
    if shared or stream:
        parts.append(shared or "0")
    if stream:
        parts.append(stream)
    return ", ".join(parts)


def _bare(text: str) -> str:
    """Without enclosing parentheses, except around a conditional (`<` and `>` next to `<<<` read badly)."""
    return text[1:-1] if _enclosed(text) and "?" not in text else text


def _dims(values: list[str]) -> str:
    return values[0] if len(values) == 1 else f"dim3({', '.join(values)})"


def _sizes_at(spec: KernelSpec, kernel: Kernel, site: LaunchSite) -> dict[str, str]:
    """Size name → the site's expression for it, from the scalar parameters that carry a size."""
    if len(site.arguments) != len(kernel.parameters):
        return {}
    carried: dict[str, str] = {}
    for index, parameter in enumerate(kernel.parameters):
        argument = spec.argument(parameter.name)
        value = str(argument.value).strip() if argument is not None and argument.value is not None else ""
        if argument is not None and argument.role == "scalar" and value in spec.sizes:
            carried.setdefault(value, _operand(site.arguments[index].strip()))
    # Sizes written as expressions of carried ones ("total = rows * cols") follow; a plain number is the
    # spec's benchmark value, not the program's, so it is not carried.
    for name, expression in spec.size_expressions.items():
        names = {n.id for n in ast.walk(_parsed(str(expression))) if isinstance(n, ast.Name)}
        names = names if name not in carried else set()
        if names and names <= carried.keys():
            carried[name] = _operand(_cpp(str(expression), carried, {}))
    return carried


def _operand(text: str) -> str:
    """`text` as an operand: a name or a number as it is, anything else in parentheses."""
    return text if text.isidentifier() or text.isdigit() or _enclosed(text) else f"({text})"


def _enclosed(text: str) -> bool:
    """Whether one pair of parentheses encloses the whole text."""
    if not (text.startswith("(") and text.endswith(")")):
        return False
    depth = 0
    for index, char in enumerate(text):
        depth += {"(": 1, ")": -1}.get(char, 0)
        if depth == 0 and index < len(text) - 1:
            return False
    return True


def _parsed(expression: str) -> ast.AST:
    try:
        return ast.parse(expression.strip(), mode="eval")
    except SyntaxError:
        return ast.parse("0", mode="eval")


def _cpp(expression: str, sizes: Mapping[str, str], block: Mapping[str, str]) -> str:
    """A spec expression (Python syntax: `ceil_div(n, block.x)`, `//`, `min`) as C++ integer code."""
    try:
        tree = ast.parse(expression.strip(), mode="eval").body
    except SyntaxError as exc:
        raise NotExpressible(expression) from exc
    return _render(tree, sizes, block)


_OPERATORS = {ast.Add: "+", ast.Sub: "-", ast.Mult: "*", ast.FloorDiv: "/", ast.Mod: "%",
              ast.LShift: "<<", ast.RShift: ">>"}  # fmt: skip
_FOLD = {ast.Add: operator.add, ast.Sub: operator.sub, ast.Mult: operator.mul,
         ast.FloorDiv: operator.floordiv, ast.Mod: operator.mod, ast.LShift: operator.lshift,
         ast.RShift: operator.rshift}  # fmt: skip


def _render(node: ast.expr, sizes: Mapping[str, str], block: Mapping[str, str]) -> str:
    if isinstance(node, ast.Constant) and isinstance(node.value, int) and not isinstance(node.value, bool):
        return str(node.value)
    if isinstance(node, ast.Name) and node.id in sizes:
        return sizes[node.id]
    if isinstance(node, ast.Attribute) and isinstance(node.value, ast.Name):
        key = f"{node.value.id}.{node.attr}"
        if key in block:
            return block[key]
    if isinstance(node, ast.BinOp) and type(node.op) in _OPERATORS:
        left, right = _render(node.left, sizes, block), _render(node.right, sizes, block)
        fold = _FOLD[type(node.op)]
        if (
            left.isdigit()
            and right.isdigit()
            and (right != "0" or fold not in (operator.floordiv, operator.mod))
        ):
            return str(fold(int(left), int(right)))  # 256 // 32 is written 8, as a person would
        return f"({left} {_OPERATORS[type(node.op)]} {right})"
    if isinstance(node, ast.UnaryOp) and isinstance(node.op, ast.USub):
        return f"(-{_render(node.operand, sizes, block)})"
    if (
        isinstance(node, ast.Call)
        and isinstance(node.func, ast.Name)
        and len(node.args) == 2
        and not node.keywords
    ):
        a, b = (_render(arg, sizes, block) for arg in node.args)
        if node.func.id == "ceil_div":
            return f"(({a} + {b} - 1) / {b})"
        if node.func.id in ("min", "max"):
            # Not std::min: a .cu file need not include <algorithm>, and host code has no ::min for int.
            return f"({a} {'<' if node.func.id == 'min' else '>'} {b} ? {a} : {b})"
    raise NotExpressible(ast.unparse(node))
