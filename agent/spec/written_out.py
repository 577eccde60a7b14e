"""A kernel's calls to the file's own `__device__` helpers written out in its body, for the analysis alone.

The inference reads the kernel's body: a buffer handed to a helper (`softmax_device(input + b * offset, n,
output + b * offset)`, darknet's way) hides what the helper reads and writes, and is refused. Written out
where it is called (each parameter a local holding its argument, the helper's locals renamed apart, its
final `return` an assignment of the result), the accesses are the kernel's own and the usual patterns
apply. Only the analysis sees this text: the spec it gives describes the same signature, so it is the
original kernel's. Calls written out: statements `f(...);`, `T v = f(...);` and `v = f(...);` of helpers
that are not templates, take no reference, and return only at their end.
"""

from __future__ import annotations

import re
from itertools import count

from cuda_agent.agent.kernels import Kernel
from cuda_agent.agent.memo import BoundedMemo
from cuda_agent.agent.parsing import parse_cuda, walk
from tree_sitter import Node, Tree

_DEPTH = 2  # helpers calling helpers: written out twice over
_IDENTIFIER = re.compile(r"[A-Za-z_]\w*")


def written_out(kernel: Kernel, source: str, tree: Tree | None = None) -> str | None:
    """The file with the kernel's helper calls written out in its body; None where it makes none."""
    changed = False
    for _ in range(_DEPTH):
        tree = tree or parse_cuda(source)
        data = source.encode("utf-8")
        helpers = _helpers(tree, kernel.name)
        own = data[kernel.start_byte : kernel.end_byte] if not changed else None
        if own is not None and not helpers.keys() & set(_IDENTIFIER.findall(own.decode("utf-8"))):
            break  # the kernel calls none (most kernels of a big file): no walk of the file for it
        body = _kernel_body(tree.root_node, kernel.name)
        if body is None:
            break
        edits = [e for s in _statements(body) if (e := _written(s, helpers, data)) is not None]
        if not edits:
            break
        for start, end, text in sorted(edits, reverse=True):
            data = data[:start] + text.encode("utf-8") + data[end:]
        source, tree, changed = data.decode("utf-8"), None, True
    return source if changed else None


def called_helpers(tree: Tree, kernel: str, words: set[str]) -> tuple[bytes, ...]:
    """The texts of the file's helpers named in the kernel (`words`): what a written-out reading of it
    depends on besides its own text (a memo of inferred specs keys on them)."""
    found = _FILE_HELPERS.get_or_make(tree, lambda: _device_functions(tree.root_node))
    return tuple(found[name].text or b"" for name in sorted(words & found.keys()) if name != kernel)


# Each tree's helpers, found once: a file of thousands of kernels asks for them once a kernel.
_FILE_HELPERS: BoundedMemo[Tree, dict[str, Node]] = BoundedMemo(8)


def _helpers(tree: Tree, kernel: str) -> dict[str, Node]:
    """The file's `__device__` functions by name (not templates, not the kernel)."""
    found = _FILE_HELPERS.get_or_make(tree, lambda: _device_functions(tree.root_node))
    return {name: node for name, node in found.items() if name != kernel}


def _device_functions(root: Node) -> dict[str, Node]:
    found = {}
    for node in root.named_children:
        if node.type != "function_definition" or b"__device__" not in (node.text or b"").split(b"(")[0]:
            continue
        declarator = node.child_by_field_name("declarator")
        name = declarator.child_by_field_name("declarator") if declarator is not None else None
        if name is not None and name.type == "identifier":
            found[_text(name)] = node
    return found


def _kernel_body(root: Node, kernel: str) -> Node | None:
    for node in root.named_children:
        if node.type == "function_definition" and b"__global__" in (node.text or b"").split(b"(")[0]:
            declarator = node.child_by_field_name("declarator")
            name = declarator.child_by_field_name("declarator") if declarator is not None else None
            if name is not None and _text(name) == kernel:
                return node.child_by_field_name("body")
    return None


def _statements(body: Node) -> list[Node]:
    found, pending = [], [body]
    while pending:
        node = pending.pop()
        if node.type in ("expression_statement", "declaration"):
            found.append(node)
        else:
            pending.extend(node.named_children)
    return found


def _written(statement: Node, helpers: dict[str, Node], data: bytes) -> tuple[int, int, str] | None:
    """The statement as a block running the helper's body, or None where it is no such call."""
    call, target, declared = _call_of(statement)
    if call is None:
        return None
    function = call.child_by_field_name("function")
    helper = helpers.get(_text(function)) if function is not None else None
    listed = call.child_by_field_name("arguments")
    if helper is None or listed is None:
        return None
    parameters = _parameters(helper)
    arguments = [a for a in listed.named_children if a.type != "comment"]
    hbody = helper.child_by_field_name("body")
    if parameters is None or hbody is None or len(parameters) != len(arguments):
        return None
    statements = [s for s in hbody.named_children if s.type != "comment"]
    returns = [n for n in walk(hbody) if n.type == "return_statement"]
    if target is None:  # `f(...);`: a void helper, returning nowhere but at its end
        if not statements or any(r is not statements[-1] or r.named_children for r in returns):
            return None
        statements = [s for s in statements if s.type != "return_statement"]
        result = None
    else:
        if len(returns) != 1 or not statements or returns[0] is not statements[-1]:
            return None
        if not returns[0].named_children:
            return None
        result = returns[0].named_children[0]
        statements = statements[:-1]
    fresh = count()
    renames = {name: f"{name}__{_text(function)}{next(fresh)}" for name in _locals(hbody, parameters)}
    lines = [f"{declared};"] if declared else []
    lines.append("{")
    for (declaration, _), argument in zip(parameters, arguments, strict=True):
        lines.append(f"{_renamed(declaration, renames, data)} = ({_text(argument)});")
    lines += [_renamed(s, renames, data) for s in statements]
    if result is not None:
        lines.append(f"{target} = {_renamed(result, renames, data)};")
    lines.append("}")
    return statement.start_byte, statement.end_byte, "\n".join(lines)


def _call_of(statement: Node) -> tuple[Node | None, str | None, str | None]:
    """(the call, the name taking its result, a declaration to make first) of `f(...);`, `T v =
    f(...);` or `v = f(...);`; (None, None, None) for any other statement."""
    if statement.type == "expression_statement" and statement.named_children:
        expression = statement.named_children[0]
        if expression.type == "call_expression":
            return expression, None, None
        operator = expression.child_by_field_name("operator")
        if expression.type == "assignment_expression" and _text(operator) == "=":
            left, right = expression.child_by_field_name("left"), expression.child_by_field_name("right")
            if left is not None and right is not None and right.type == "call_expression":
                return right, _text(left), None
    if statement.type == "declaration":
        declarators = statement.children_by_field_name("declarator")
        kind = statement.child_by_field_name("type")
        if len(declarators) == 1 and declarators[0].type == "init_declarator" and kind is not None:
            name = declarators[0].child_by_field_name("declarator")
            value = declarators[0].child_by_field_name("value")
            called = value is not None and value.type == "call_expression"
            if name is not None and name.type == "identifier" and called:
                return value, _text(name), f"{_text(kind)} {_text(name)}"
    return None, None, None


def _parameters(helper: Node) -> list[tuple[Node, str]] | None:
    """Each parameter's declaration node and name; None where one is a reference or unnamed."""
    declarator = helper.child_by_field_name("declarator")
    listed = declarator.child_by_field_name("parameters") if declarator is not None else None
    found = []
    for parameter in listed.named_children if listed is not None else []:
        if parameter.type != "parameter_declaration":
            continue
        if any(n.type == "reference_declarator" for n in walk(parameter)):
            return None
        name = parameter.child_by_field_name("declarator")
        while name is not None and name.type != "identifier":
            name = name.child_by_field_name("declarator")
        if name is None:
            return None
        found.append((parameter, _text(name)))
    return found


def _locals(body: Node, parameters: list[tuple[Node, str]]) -> set[str]:
    names = {name for _, name in parameters}
    for node in walk(body):
        if node.type in ("init_declarator", "declaration", "pointer_declarator", "array_declarator"):
            inner = node.child_by_field_name("declarator")
            if inner is not None and inner.type == "identifier":
                names.add(_text(inner))
    return names


def _renamed(node: Node, renames: dict[str, str], data: bytes) -> str:
    pieces, cursor = [], node.start_byte
    for child in walk(node):
        if child.type == "identifier" and _text(child) in renames and child.start_byte >= cursor:
            pieces.append(data[cursor : child.start_byte].decode("utf-8"))
            pieces.append(renames[_text(child)])
            cursor = child.end_byte
    pieces.append(data[cursor : node.end_byte].decode("utf-8"))
    return "".join(pieces)


def _text(node: Node | None) -> str:
    return (node.text or b"").decode("utf-8") if node is not None else ""
