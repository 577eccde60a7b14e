"""The `#if` branches a compile takes through a header, as far as the files show.

Benchmark headers define one thing several ways and let a flag choose (`#ifdef POLYBENCH_USE_SCALAR_LB
#define POLYBENCH_LOOP_BOUND(x,y) x #else ... y #endif`, one `#define NI` per dataset size). Taking the
first spelling would analyse code the compile never sees. Here the branches are decided the way the
preprocessor decides them, from what is defined by then (the including file's own `#define`s, then each
header's in order): `#ifdef`, `#ifndef`, `#if` on `defined(...)`, numbers and the defined numeric macros
(an undefined name is 0, as in C). A condition that reads anything else is not decided: every branch
is read, and a name that its branches define differently is left out.
"""

from __future__ import annotations

from collections.abc import Iterator
from typing import TYPE_CHECKING

from cuda_agent.agent.analysis.values import (
    Definitions,
    definitions_of,
    expression_of,
    file_definitions,
    text,
    unwrap,
)
from cuda_agent.agent.memo import BoundedMemo
from cuda_agent.agent.parsing import parse_cuda
from cuda_agent.agent.spec.headers import headers_stamp, local_headers
from tree_sitter import Node

if TYPE_CHECKING:  # the proposers' tree imports the analysis
    from cuda_agent.agent.proposers.tree import KernelTree

DEFINITIONS = ("preproc_def", "preproc_function_def")
_KERNEL_DEFINITIONS: BoundedMemo[tuple[object, ...], Definitions] = BoundedMemo(256)


def kernel_definitions(tree: KernelTree) -> Definitions:
    """The kernel's file's definitions, and those of the project's own headers it includes (`#define NJ
    512` in gemm.cuh) in the branches the compile takes (see the module's note), the file's own winning."""
    data = tree.data
    values = tree.target.template_values() or {}
    key = (str(tree.target.path), len(data), hash(data), headers_stamp(tree.target.path, data))
    key += (tuple(sorted(values.items())),)
    return _KERNEL_DEFINITIONS.get_or_make(key, lambda: _with_template_values(_with_headers(tree), tree))


def _with_template_values(definitions: Definitions, tree: KernelTree) -> Definitions:
    """A template's value parameters as the spec instantiates it (`D` of `scale_rows<256>` is 256), like a
    `#define` for the analysis; its type parameters are types, not values."""
    values = tree.target.template_values()
    if not values:
        return definitions
    kinds = {p.name: p.kind for p in tree.target.kernel.template_parameters}
    constants = dict(definitions.constants)
    for name, value in values.items():
        node = expression_of(value) if kinds[name] == "value" else None
        if node is not None:
            constants[name] = node
    return Definitions(constants, dict(definitions.inlines))


def _with_headers(tree: KernelTree) -> Definitions:
    own = file_definitions(tree.root)
    merged = Definitions(dict(own.constants), dict(own.inlines))
    defined = {text(name): "" for n in _all(tree.root) if (name := n.child_by_field_name("name")) is not None}
    for header in local_headers(tree.target.path, tree.data):
        taken = list(taken_nodes(parse_cuda(header.data).root_node, defined))
        found = definitions_of(node for node, _ in taken)
        spellings: dict[str, set[str]] = {}
        for node, certain in taken:
            name, value = node.child_by_field_name("name"), node.child_by_field_name("value")
            if node.type in DEFINITIONS and name is not None and not certain:
                spellings.setdefault(text(name), set()).add(" ".join(text(value).split()) if value else "")
        undecided = {name for name, texts in spellings.items() if len(texts) > 1}
        for name, expression in found.constants.items():
            if name not in undecided and name not in merged.inlines:
                merged.constants.setdefault(name, expression)
        for name, inline in found.inlines.items():
            if name not in undecided and name not in merged.constants:
                merged.inlines.setdefault(name, inline)
    return merged


def _all(root: Node) -> Iterator[Node]:
    stack = [root]
    while stack:
        node = stack.pop()
        if node.type in DEFINITIONS:
            yield node
        elif node.type != "function_definition":
            stack.extend(node.children)


def taken_nodes(root: Node, defined: dict[str, str]) -> Iterator[tuple[Node, bool]]:
    """The file's nodes in source order, in the branches the compile takes, each with whether that is
    certain (False: under a condition the run could not decide). `defined`: name -> replacement text of
    what is defined before the file (updated as the file defines and undefines)."""
    yield from _walk(root, defined, True)


def _walk(node: Node, defined: dict[str, str], certain: bool) -> Iterator[tuple[Node, bool]]:
    for child in node.named_children:
        kind = child.type
        if kind in ("preproc_ifdef", "preproc_if", "preproc_elif"):
            yield from _conditional(child, defined, certain)
        elif kind in DEFINITIONS:
            name, value = child.child_by_field_name("name"), child.child_by_field_name("value")
            if name is not None:
                defined[text(name)] = " ".join(text(value).split()) if value is not None else ""
            yield child, certain
        elif kind == "preproc_call" and text(child.child_by_field_name("directive") or child) == "#undef":
            argument = child.child_by_field_name("argument")
            if argument is not None:
                defined.pop(text(argument).strip(), None)
        elif kind in ("function_definition", "preproc_include", "type_definition", "declaration"):
            yield child, certain
        elif kind in ("linkage_specification", "declaration_list", "namespace_definition"):
            body = child.child_by_field_name("body")
            yield from _walk(body if body is not None else child, defined, certain)


def _conditional(node: Node, defined: dict[str, str], certain: bool) -> Iterator[tuple[Node, bool]]:
    holds = _holds(node, defined)
    alternative = node.child_by_field_name("alternative")
    body = _Body(node, alternative)
    if holds is True:
        yield from _walk(body, defined, certain)
    elif holds is False:
        if alternative is not None:
            yield from _alternative(alternative, defined, certain)
    else:
        yield from _walk(body, defined, False)
        if alternative is not None:
            yield from _alternative(alternative, defined, False)


def _alternative(node: Node, defined: dict[str, str], certain: bool) -> Iterator[tuple[Node, bool]]:
    if node.type == "preproc_elif":
        yield from _conditional(node, defined, certain)
    else:  # preproc_else
        yield from _walk(node, defined, certain)


class _Body:
    """A conditional's own children, without its condition and its `#else`/`#elif` part."""

    def __init__(self, node: Node, alternative: Node | None) -> None:
        skip = {id(n) for n in (node.child_by_field_name("condition"), node.child_by_field_name("name"))}
        self.named_children = [
            c for c in node.named_children if id(c) not in skip and (alternative is None or c != alternative)
        ]


def _holds(node: Node, defined: dict[str, str]) -> bool | None:
    if node.type == "preproc_ifdef":
        name = node.child_by_field_name("name")
        negated = bool(node.children) and node.children[0].type == "#ifndef"
        if name is None:
            return None
        return (text(name) in defined) != negated
    condition = node.child_by_field_name("condition")
    value = _value(condition, defined) if condition is not None else None
    return None if value is None else value != 0


def _value(node: Node, defined: dict[str, str], depth: int = 0) -> int | None:
    node = unwrap(node)
    kind = node.type
    if kind == "preproc_defined":
        names = [c for c in node.named_children if c.type == "identifier"]
        return int(text(names[0]) in defined) if names else None
    if kind == "number_literal":
        try:
            return int(text(node).rstrip("uUlL"), 0)
        except ValueError:
            return None
    if kind == "identifier":
        if text(node) not in defined:
            return 0  # the preprocessor reads an undefined name as 0
        replacement = defined[text(node)]
        try:
            return int(replacement.rstrip("uUlL"), 0) if replacement else None
        except ValueError:
            return None
    if kind == "unary_expression":
        operator, argument = node.child_by_field_name("operator"), node.child_by_field_name("argument")
        inner = _value(argument, defined) if argument is not None else None
        if operator is None or inner is None:
            return None
        return {"!": int(not inner), "-": -inner, "+": inner, "~": ~inner}.get(operator.type)
    if kind == "binary_expression":
        operator = node.child_by_field_name("operator")
        left, right = node.child_by_field_name("left"), node.child_by_field_name("right")
        if operator is None or left is None or right is None:
            return None
        a, b = _value(left, defined), _value(right, defined)
        if operator.type == "&&" and (a == 0 or b == 0):
            return 0
        if operator.type == "||" and ((a is not None and a != 0) or (b is not None and b != 0)):
            return 1
        if a is None or b is None:
            return None
        results = {"&&": int(bool(a and b)), "||": int(bool(a or b)), "==": int(a == b), "!=": int(a != b)}
        results |= {"<": int(a < b), "<=": int(a <= b), ">": int(a > b), ">=": int(a >= b)}
        results |= {"+": a + b, "-": a - b, "*": a * b}
        return results.get(operator.type)
    return None
