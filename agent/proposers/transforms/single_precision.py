"""Float arithmetic that unsuffixed literals made double -> float again: `1.0` -> `1.0f`, `M_PI` ->
`(float)M_PI`.

First drafts write `1.0 / (1.0 + exp(-z))` or `0.5 * x * (1.0 + tanhf(...))` on float data: C's literal
is a double, so the float operand is converted, the division and the adds run in double precision (a
long instruction sequence on every GPU, no special-function unit) and the result is converted back.
Suffixed, the same expressions stay in float, as torch computes them. Offered for kernels whose data
are all single or half precision and whose code (the kernel and the file's functions it calls) never
names `double`: a user who declared a double meant it. The results move by float rounding, which the
spec's tolerance checks, and the candidate states it.
"""

from __future__ import annotations

import re
from collections.abc import Iterator

from cuda_agent.agent.candidates import Candidate
from cuda_agent.agent.proposers.tree import (
    Edit,
    KernelTree,
    candidate_from,
    declarator_name,
    kernel_tree,
    walk,
)
from cuda_agent.agent.targets import KernelTarget
from tree_sitter import Node

PROPOSER = "single-precision"
# <math.h>'s constants are double literals behind a name (as are a file's own `#define EPS 1e-5`)
_DOUBLE_CONSTANTS = frozenset(
    {
        "M_E", "M_LOG2E", "M_LOG10E", "M_LN2", "M_LN10", "M_PI", "M_PI_2", "M_PI_4", "M_1_PI", "M_2_PI",
        "M_2_SQRTPI", "M_SQRT2", "M_SQRT1_2",
    }
)  # fmt: skip
# a decimal floating literal with no suffix: a dot or an exponent, digits only
_DOUBLE_LITERAL = re.compile(r"(\d+\.\d*|\.\d+|\d+)([eE][+-]?\d+)?")
_WIDE_DTYPES = frozenset({"float64"})  # a double complex is float64 too


def propose_single_precision(target: KernelTarget) -> list[Candidate]:
    tree = kernel_tree(target)
    spec = target.spec
    if tree is None or spec is None or any(a.dtype in _WIDE_DTYPES for a in spec.arguments):
        return []
    definitions, macros = _file_names(tree)
    functions = [tree.definition, *_called_functions(tree, definitions)]
    if any(n.type == "primitive_type" and tree.text(n) == "double" for f in functions for n in walk(f)):
        return []
    constants = _DOUBLE_CONSTANTS | macros
    edits: list[Edit] = []
    for function in functions:
        body = function.child_by_field_name("body")
        if body is not None:
            edits += _edits(tree, body, constants)
    if not edits:
        return []
    literals = sum(1 for _, _, new in edits if new == "f")
    cast = len(edits) - literals
    what = " and ".join(
        part
        for part in (
            f"{literals} double literal{'s' if literals != 1 else ''} suffixed f" if literals else "",
            f"{cast} double constant{'s' if cast != 1 else ''} cast to float" if cast else "",
        )
        if part
    )
    return [
        candidate_from(
            target,
            tree.apply_to_file(edits),
            description=f"float arithmetic instead of double: {what}",
            proposer=PROPOSER,
            assumptions=("float arithmetic where literals made it double (results within tolerance)",),
        )
    ]


def _top_level(root: Node) -> Iterator[Node]:
    """The file's declarations outside functions, those under `#if`s included (not a body's nodes)."""
    for node in root.named_children:
        yield node
        if node.type.startswith("preproc_if") or node.type in ("preproc_else", "preproc_elif"):
            yield from _top_level(node)


def _edits(tree: KernelTree, body: Node, constants: frozenset[str]) -> list[Edit]:
    edits: list[Edit] = []
    for node in walk(body):
        if node.type not in ("number_literal", "identifier"):
            continue
        written = tree.text(node)
        if node.type == "number_literal" and _double_literal(written):
            edits.append((node.end_byte, node.end_byte, "f"))
        elif node.type == "identifier" and written in constants:
            edits.append((node.start_byte, node.end_byte, f"((float){written})"))
    return edits


def _double_literal(written: str) -> bool:
    return _DOUBLE_LITERAL.fullmatch(written) is not None and not written.isdigit()


def _file_names(tree: KernelTree) -> tuple[dict[str, Node], frozenset[str]]:
    """In one pass over the file's top level: its function definitions by name (templates included, the
    kernel left out) and its `#define EPS 1e-5`s, double literals behind a name as math.h's are."""
    definitions: dict[str, Node] = {}
    macros = set()
    for node in _top_level(tree.root):
        if node.type == "preproc_def":
            name, value = node.child_by_field_name("name"), node.child_by_field_name("value")
            written = tree.text(value).strip().strip("()").strip().lstrip("-") if value is not None else ""
            if name is not None and _double_literal(written):
                macros.add(tree.text(name))
            continue
        definition = node
        if node.type == "template_declaration":
            definition = next((c for c in node.named_children if c.type == "function_definition"), node)
        if definition.type == "function_definition" and definition != tree.definition:
            name = declarator_name(definition)
            if name:
                definitions.setdefault(name, definition)
    return definitions, frozenset(macros)


def _called_functions(tree: KernelTree, defined: dict[str, Node]) -> list[Node]:
    """The file's functions (`defined`) the kernel calls, directly or through each other: a helper's `1.0`
    is the kernel's as much as its own."""
    found: list[Node] = []
    pending = [tree.definition]
    while pending:
        for node in walk(pending.pop()):
            if node.type != "call_expression":
                continue
            function = node.child_by_field_name("function")
            if function is not None and function.type == "template_function":
                function = function.child_by_field_name("name")
            callee = defined.get(tree.text(function)) if function is not None else None
            if callee is not None and callee not in found:
                found.append(callee)
                pending.append(callee)
    return found
