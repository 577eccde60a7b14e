"""`const` and `__restrict__` on pointer parameters, when the spec says the buffers do not alias.

With every pointer `__restrict__` and inputs `const`, the compiler may keep loaded values in registers
across stores and route read-only loads through the non-coherent texture path (`ld.global.nc`), which is
what `__ldg` asks for by hand. It is only correct if no two pointers overlap: the spec says so when no
argument declares `may_alias`, and the candidate states it as an assumption the user must keep.
"""

from __future__ import annotations

from cuda_agent.agent.candidates import Candidate
from cuda_agent.agent.kernels import Parameter
from cuda_agent.agent.proposers.tree import Edit, KernelTree, candidate_from, kernel_tree
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
        edits += _parameter_edits(tree, parameter, make_const=roles.get(parameter.name) == "input")
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
