"""A `__device__` helper with a loop, called by the kernel -> its body written out at the call.

The rewrites see a kernel's own loops; a helper's loop (`float best = row_max(x_row, cols);`, a
`block_sum(...)`) is hidden behind the call. Written out at the call (its parameters as locals holding
the arguments, each evaluated once as a call would, its locals renamed where they clash with the
kernel's, its `return` as an assignment of the result), the loop becomes the kernel's, and the search
can split or vectorise it in the next round. Only helpers whose single `return` ends their body.
"""

from __future__ import annotations

from cuda_agent.agent.analysis import analysed
from cuda_agent.agent.analysis.values import text, unwrap
from cuda_agent.agent.candidates import Candidate
from cuda_agent.agent.proposers.tree import Edit, KernelTree, candidate_from, fresh_names, line_indent, walk
from cuda_agent.agent.targets import KernelTarget
from tree_sitter import Node

PROPOSER = "rewrite:inline"


class _Unsupported(Exception):
    """The call or the helper is not one this rewrite writes out; the message says why."""


def propose(target: KernelTarget) -> list[Candidate]:
    found = analysed(target)
    if found is None:
        return []
    tree, _ = found
    helpers = _helpers(tree)
    edits: list[Edit] = []
    inlined: list[str] = []
    taken = tree.names()
    for node in walk(tree.body):
        call = _call_statement(node, helpers)
        if call is None:
            continue
        try:
            edits.append(_inlined(tree, node, call, helpers[_callee(call)], taken))
        except _Unsupported:
            continue
        inlined.append(_callee(call))
    if not edits:
        return []
    names = ", ".join(dict.fromkeys(inlined))
    return [
        candidate_from(
            target,
            tree.apply_to_file(edits),
            description=f"{names} written out where {'they are' if len(inlined) > 1 else 'it is'} called, "
            "so the loop is the kernel's own",
            proposer=PROPOSER,
        )
    ]


def _helpers(tree: KernelTree) -> dict[str, Node]:
    """The file's `__device__` functions that have a loop, by name."""
    found = {}
    for node in tree.root.named_children:
        if node.type != "function_definition" or not any(text(c) == "__device__" for c in node.children):
            continue
        declarator = node.child_by_field_name("declarator")
        name = declarator.child_by_field_name("declarator") if declarator is not None else None
        body = node.child_by_field_name("body")
        if name is None or body is None or name.type != "identifier":
            continue
        if any(n.type in ("for_statement", "while_statement", "do_statement") for n in walk(body)):
            found[text(name)] = node
    return found


def _callee(call: Node) -> str:
    function = call.child_by_field_name("function")
    return text(function) if function is not None else ""


def _call_statement(node: Node, helpers: dict[str, Node]) -> Node | None:
    """The helper call a statement is made of: `T v = f(...);` or `v = f(...);`."""
    value = None
    if node.type == "declaration":
        declarators = node.children_by_field_name("declarator")
        if len(declarators) == 1 and declarators[0].type == "init_declarator":
            value = declarators[0].child_by_field_name("value")
    elif node.type == "expression_statement" and node.named_children:
        expression = unwrap(node.named_children[0])
        operator = (
            expression.child_by_field_name("operator") if expression.type == "assignment_expression" else None
        )
        if operator is not None and operator.type == "=":
            value = expression.child_by_field_name("right")
    value = unwrap(value) if value is not None else None
    if value is not None and value.type == "call_expression" and _callee(value) in helpers:
        return value
    return None


def _inlined(tree: KernelTree, statement: Node, call: Node, helper: Node, taken: set[str]) -> Edit:
    body = helper.child_by_field_name("body")
    declarator = helper.child_by_field_name("declarator")
    assert body is not None and declarator is not None
    statements = [s for s in body.named_children if s.type != "comment"]
    if not statements or statements[-1].type != "return_statement" or not statements[-1].named_children:
        raise _Unsupported("the helper does not end with its one return")
    if sum(1 for n in walk(body) if n.type == "return_statement") != 1:
        raise _Unsupported("the helper returns in several places")
    parameters = _parameters(helper, declarator)
    arguments_node = call.child_by_field_name("arguments")
    arguments = [a for a in arguments_node.named_children if a.type != "comment"] if arguments_node else []
    if len(arguments) != len(parameters):
        raise _Unsupported("a call with default arguments")
    local = {name for _, name in parameters} | _declared(body)
    ordered = sorted(local)
    renames = dict(zip(ordered, fresh_names(taken, *ordered), strict=True))
    indent = line_indent(tree, statement)
    unit = tree.indent_unit()
    target, kind = _result(tree, statement)
    helper_indent = _indent_of(helper, statements[0])
    lines = [f"{kind} {target};" if kind else None, f"{{  // {_callee(call)}(...), written out"]
    lines = [line for line in lines if line is not None]
    for (ptype, name), argument in zip(parameters, arguments, strict=True):
        lines.append(f"{unit}{ptype} {renames[name]} = {tree.text(argument)};")
    for piece in statements[:-1]:
        for n, line in enumerate(_renamed(tree, piece, renames).split("\n")):
            line = line[len(helper_indent) :] if n and line.startswith(helper_indent) else line
            lines.append(unit + line)
    returned = statements[-1].named_children[0]
    lines.append(f"{unit}{target} = {_renamed(tree, returned, renames)};")
    lines.append("}")
    return statement.start_byte, statement.end_byte, ("\n" + indent).join(lines)


def _parameters(helper: Node, declarator: Node) -> list[tuple[str, str]]:
    """(type as written, name) of each parameter; references and arrays are not taken."""
    parameters = declarator.child_by_field_name("parameters")
    found = []
    for parameter in parameters.named_children if parameters is not None else []:
        if parameter.type != "parameter_declaration":
            continue
        inner = parameter.child_by_field_name("declarator")
        if inner is None or any(
            n.type in ("reference_declarator", "array_declarator") for n in walk(parameter)
        ):
            raise _Unsupported("a parameter by reference or an array")
        name = inner
        while name is not None and name.type != "identifier":
            name = name.child_by_field_name("declarator")
        if name is None:
            raise _Unsupported("an unnamed parameter")
        written = text(parameter)
        found.append((written[: written.rindex(text(name))].strip(), text(name)))
    return found


def _declared(body: Node) -> set[str]:
    names = set()
    for node in walk(body):
        if node.type == "declaration":
            for declarator in node.children_by_field_name("declarator"):
                inner: Node | None = declarator
                while inner is not None and inner.type != "identifier":
                    inner = inner.child_by_field_name("declarator")
                if inner is not None:
                    names.add(text(inner))
    return names


def _result(tree: KernelTree, statement: Node) -> tuple[str, str | None]:
    """(the variable that takes the result, its type when the statement declared it)."""
    if statement.type == "declaration":
        (declarator,) = statement.children_by_field_name("declarator")
        name = declarator.child_by_field_name("declarator")
        kind = statement.child_by_field_name("type")
        if name is None or kind is None or name.type != "identifier":
            raise _Unsupported("a declarator that is not a plain name")
        return text(name), tree.text(kind)  # without const: it is assigned once, just below
    expression = unwrap(statement.named_children[0])
    left = expression.child_by_field_name("left")
    assert left is not None
    return tree.text(left), None


def _renamed(tree: KernelTree, node: Node, renames: dict[str, str]) -> str:
    return tree.substituted(node, lambda n: renames.get(text(n)) if n.type == "identifier" else None)


def _indent_of(helper: Node, statement: Node) -> str:
    source = (helper.text or b"").decode("utf-8")
    offset = statement.start_byte - helper.start_byte
    line_start = source.rfind("\n", 0, offset) + 1
    return source[line_start:offset]
