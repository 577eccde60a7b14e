"""`const` and `__restrict__` on pointer parameters, when the spec says the buffers do not alias.

With every pointer `__restrict__` and inputs `const`, the compiler may keep loaded values in registers
across stores and route read-only loads through the non-coherent texture path (`ld.global.nc`), which is
what `__ldg` asks for by hand. It is only correct if no two pointers overlap: the spec says so when no
argument declares `may_alias`, and the candidate states it as an assumption the user must keep.
"""

from __future__ import annotations

from cuda_agent.agent.candidates import Candidate
from cuda_agent.agent.kernels import Parameter
from cuda_agent.agent.proposers.tree import CACHED_LOADS, Edit, KernelTree, candidate_from, kernel_tree, walk
from cuda_agent.agent.targets import KernelTarget
from tree_sitter import Node

PROPOSER = "restrict"


def propose_restrict(target: KernelTarget) -> list[Candidate]:
    tree = kernel_tree(target)
    spec = target.spec
    if tree is None or spec is None or any(a.may_alias for a in spec.arguments):
        return []
    roles = {a.name: a.role for a in spec.arguments}
    pointers = [p for p in target.kernel.parameters if p.is_pointer and roles.get(p.name) != "scalar"]
    if len(pointers) < 2:
        return []  # a single pointer cannot alias another
    edits: list[Edit] = []
    for parameter in pointers:
        readable = roles.get(parameter.name) == "input" and _reads_only(tree, parameter.name)
        edits += _parameter_edits(tree, parameter, make_const=readable)
    if not edits:
        return []
    names = [p.name for p in pointers]
    listed = ", ".join(names[:-1]) + f" and {names[-1]}"
    return [
        candidate_from(
            target,
            tree.apply_to_file(edits),
            description="__restrict__ pointers, const inputs (read-only loads)",
            proposer=PROPOSER,
            assumptions=(f"{listed} do not alias (no two point into the same memory)",),
        )
    ]


def _parameter_edits(tree: KernelTree, parameter: Parameter, make_const: bool) -> list[Edit]:
    """`float* x` → `const float* __restrict__ x`: `const` before the type of inputs, `__restrict__`
    right before the name, everything else as written. Arrays (`float x[]`) and `float**` are skipped."""
    node = tree.definition.descendant_for_byte_range(parameter.span.start_byte, parameter.span.end_byte)
    while node is not None and node.type != "parameter_declaration":
        node = node.parent
    if node is None or parameter.pointer_depth != 1:
        return []
    declarator = node.child_by_field_name("declarator")
    if declarator is None or declarator.type != "pointer_declarator":
        return []
    name = _name(declarator)
    if name is None:
        return []
    edits: list[Edit] = []
    if make_const and not parameter.is_const:
        edits.append((node.start_byte, node.start_byte, "const "))
    if not parameter.is_restrict:
        edits.append((name.start_byte, name.start_byte, "__restrict__ "))
    return edits


def _name(declarator: Node) -> Node | None:
    inner = declarator.child_by_field_name("declarator")
    return inner if inner is not None and inner.type == "identifier" else None


def _reads_only(tree: KernelTree, name: str) -> bool:
    """Whether `const` on the pointer keeps the kernel compiling: each use reads an element (`x[i]`,
    also as a call's value), takes a read-only address (`__ldg(&x[i])`, `const float* row = x + k;`),
    or does arithmetic that such a use consumes. An address cast (`reinterpret_cast<float4*>(&x[i])`,
    also inside a macro), passed to a function or stored in a non-const pointer would lose the `const`
    and fail to compile."""
    macros = _address_macros(tree)
    for node in walk(tree.body):
        if node.type == "identifier" and tree.text(node) == name and not _read_use(tree, node, macros):
            return False
    return True


def _read_use(tree: KernelTree, node: Node, macros: set[str]) -> bool:
    child, parent = node, node.parent
    element = False  # reached through a subscript: a value, unless its address is taken
    while parent is not None and parent != tree.body:
        kind = parent.type
        if kind == "subscript_expression" and child == parent.child_by_field_name("argument"):
            element = True
        elif kind == "pointer_expression":
            operator = parent.child_by_field_name("operator")
            element = operator is None or operator.type != "&"  # `*p` reads the element, `&e` takes it
        elif kind == "cast_expression" and not element:
            return False  # the pointer itself cast: `(float4*)x`
        elif kind == "call_expression":
            function = tree.text(parent.child_by_field_name("function") or parent)
            if function in macros or ("cast" in function and not element):
                return False
            return element or function in CACHED_LOADS  # a read-only address: the element stays const
        elif kind in ("assignment_expression", "update_expression"):
            target = parent.child_by_field_name("left" if kind == "assignment_expression" else "argument")
            if target is not None and target.start_byte <= node.start_byte < target.end_byte:
                return False  # stored to (the role said input: leave it as written)
            return element
        elif kind == "init_declarator":
            declaration = parent.parent
            return element or (declaration is not None and "const" in tree.text(declaration).split("=")[0])
        elif kind in ("expression_statement", "return_statement", "declaration"):
            return element
        elif kind in ("binary_expression", "parenthesized_expression", "conditional_expression"):
            if kind == "binary_expression" and not element:
                operator = parent.child_by_field_name("operator")
                if operator is not None and operator.type not in ("+", "-"):
                    element = True  # `x == nullptr`: a comparison reads the pointer, it keeps nothing
        elif kind in ("if_statement", "while_statement", "for_statement", "condition_clause"):
            return True
        child, parent = parent, parent.parent
    return element


def _address_macros(tree: KernelTree) -> set[str]:
    """The file's function-like macros whose expansion takes an address or casts (`FLOAT4(x[i])`)."""
    found = set()
    for node in walk(tree.root):
        if node.type != "preproc_function_def":
            continue
        name, value = node.child_by_field_name("name"), node.child_by_field_name("value")
        body = tree.text(value) if value is not None else ""
        if name is not None and ("&" in body or "cast" in body or "*)" in body):
            found.add(tree.text(name))
    return found
