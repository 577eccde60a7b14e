"""Spellings that compute the same written one way, before the analysis matches the kernel.

A rewrite recognises what a kernel computes from one spelling of it; first drafts write the same thing
several ways. Each function here takes a target and gives it back with its kernel's text respelled (and
the kernel read again from that text), or as it was; only where the new text computes the same:

- `inlined_loop_locals`: a loop's locals written where they are read. A first draft often loads each
  factor into a local before it multiplies them: `for (...) { float a = A[row * K + k]; float b =
  B[k * N + col]; acc += a * b; }` is `acc += (float)(A[row * K + k]) * (float)(B[k * N + col]);`, each
  value converted to its declared type as the declaration did. Where every statement of the body but the
  last declares one initialised local (no `auto`, no pointer or array declarator) whose value has no side
  effects (no assignments, increments or calls other than loads and conversions), and the last statement
  is an expression; the locals' scope ends with the body.
- `without_else_return`: the kernel's last statement `if (i < n) { ... } else { return; }` is `if (i <
  n) { ... }`: returning at the end of the kernel does nothing. The bounds check is then the one the
  analysis and the rewrites know.
"""

from __future__ import annotations

from dataclasses import replace

from cuda_agent.agent.analysis.values import text
from cuda_agent.agent.kernels import Kernel, find_kernels
from cuda_agent.agent.memo import BoundedMemo
from cuda_agent.agent.proposers.tree import KernelTree, kernel_tree, statements, walk
from cuda_agent.agent.targets import KernelTarget
from tree_sitter import Node

# Calls whose value depends on their arguments alone: loads through the read-only cache and conversions.
PURE_CALLS = frozenset({
    "__ldg", "__half2float", "__bfloat162float", "__float2half", "__float2half_rn", "__float2bfloat16",
    "__float2bfloat16_rn", "__int2float_rn", "__uint2float_rn", "__low2float", "__high2float",
    "static_cast<float>", "static_cast<double>", "static_cast<int>", "float", "double",
})  # fmt: skip
_EFFECTS = frozenset({"assignment_expression", "update_expression", "comma_expression"})


def inlined_loop_locals(target: KernelTarget) -> KernelTarget:
    """The target with its loops' locals written where they are read (see the module), or as it was."""
    tree = kernel_tree(target)
    if tree is None:
        return target
    edits = []
    for node in walk(tree.body):
        body = node.child_by_field_name("body") if node.type == "for_statement" else None
        if body is None or body.type != "compound_statement":
            continue
        inlined = _inlined(tree, statements(body))
        if inlined is not None:
            edits.append((body.start_byte, body.end_byte, "{ " + inlined + " }"))
    return _respelled(target, tree, edits)


def without_else_return(target: KernelTarget) -> KernelTarget:
    """The target without the `else { return; }` of its last statement (see the module), or as it was.
    Every rewrite and idiom asks, for the same target: the answer (the new text and its kernel, or None)
    is kept, keyed by the kernel's text."""
    key = (target.source, target.kernel.name, target.kernel.body_span.start_byte)
    found = _WITHOUT_ELSE_RETURN.get_or_make(key, lambda: _without_else_return(target))
    return target if found == _UNCHANGED else replace(target, source=found[0], kernel=found[1])


_UNCHANGED = ("", None)
_WITHOUT_ELSE_RETURN: BoundedMemo[tuple[str, str, int], tuple[str, Kernel | None]] = BoundedMemo(256)


def _without_else_return(target: KernelTarget) -> tuple[str, Kernel | None]:
    tree = kernel_tree(target)
    if tree is None:
        return _UNCHANGED
    body = statements(tree.body)
    last = body[-1] if body else None
    alternative = (
        last.child_by_field_name("alternative") if last is not None and last.type == "if_statement" else None
    )
    consequence = last.child_by_field_name("consequence") if last is not None else None
    if alternative is None or consequence is None:
        return _UNCHANGED
    branch = [c for c in alternative.named_children if c.type != "comment"]
    inner = statements(branch[0]) if len(branch) == 1 else [None]
    if not all(s is not None and s.type == "return_statement" and not s.named_children for s in inner):
        return _UNCHANGED
    respelled = _respelled(target, tree, [(consequence.end_byte, alternative.end_byte, "")])
    return (respelled.source, respelled.kernel) if respelled is not target else _UNCHANGED


def _respelled(target: KernelTarget, tree: KernelTree, edits: list[tuple[int, int, str]]) -> KernelTarget:
    """The target whose file has the edits applied to its kernel, the kernel read again; as it was where
    there are none, or the kernel cannot be found again."""
    if not edits:
        return target
    source = tree.apply_to_file(edits)

    def identity(k: Kernel) -> tuple[str, str | None, str]:
        return k.name, k.template_arguments, k.namespace

    found = [k for k in find_kernels(source) if identity(k) == identity(target.kernel)]
    return replace(target, source=source, kernel=found[0]) if len(found) == 1 else target


def _inlined(tree: KernelTree, items: list[Node]) -> str | None:
    """The last statement's text with the declarations before it written into it, or None."""
    if len(items) < 2 or items[-1].type != "expression_statement":
        return None
    values: dict[str, str] = {}

    def substitute(node: Node) -> str | None:
        return values.get(text(node)) if node.type == "identifier" else None

    for declaration in items[:-1]:
        declared = _declared(declaration)
        if declared is None or declared[0] in values:
            return None
        name, type_text, value = declared
        values[name] = f"(({type_text})({tree.substituted(value, substitute)}))"
    return tree.substituted(items[-1], substitute)


def _declared(declaration: Node) -> tuple[str, str, Node] | None:
    """(name, type, value) of `T name = value;` whose value has no side effects."""
    if declaration.type != "declaration":
        return None
    type_node = declaration.child_by_field_name("type")
    declarators = [c for c in declaration.named_children if c.type == "init_declarator"]
    others = [
        c
        for c in declaration.named_children
        if c.type not in ("init_declarator", "type_qualifier", "comment")
    ]
    if type_node is None or len(declarators) != 1 or others != [type_node] or text(type_node) == "auto":
        return None
    name, value = (
        declarators[0].child_by_field_name("declarator"),
        declarators[0].child_by_field_name("value"),
    )
    if name is None or value is None or name.type != "identifier" or not _pure(value):
        return None
    return text(name), text(type_node), value


def _pure(node: Node) -> bool:
    for child in walk(node):
        if child.type in _EFFECTS:
            return False
        if child.type == "call_expression":
            function = child.child_by_field_name("function")
            if function is None or text(function).replace(" ", "") not in PURE_CALLS:
                return False
    return True
