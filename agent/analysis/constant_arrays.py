"""The `__constant__` arrays a file declares at its top level: what device code can only read.

The analysis reads an element of one as a value (agent/analysis/values.py); the ones host code fills are
the sandbox's to fill (agent/constant_inputs.py). A namespace's are not looked for: theirs would be a
mangled symbol in the cubin.
"""

from __future__ import annotations

from dataclasses import dataclass

from cuda_agent.agent.analysis.values import text
from cuda_agent.agent.memo import BoundedMemo
from cuda_agent.agent.parsing import parse_cuda
from tree_sitter import Node


@dataclass(frozen=True)
class ConstantArray:
    name: str
    c_type: str  # the element type as written ("float", "__half")
    initialised: bool  # `= {...}`: its values are in the source


_FOUND: BoundedMemo[str, tuple[ConstantArray, ...]] = BoundedMemo(64)


def constant_arrays(source: str) -> tuple[ConstantArray, ...]:
    """The file's top-level `__constant__` arrays, in the order declared."""
    if "__constant__" not in source:
        return ()
    return _FOUND.get_or_make(source, lambda: _declared(source))


def _declared(source: str) -> tuple[ConstantArray, ...]:
    found = []
    for declaration in parse_cuda(source).root_node.named_children:
        type_node = declaration.child_by_field_name("type")
        if declaration.type != "declaration" or type_node is None or not _is_constant(declaration):
            continue
        for declarator in declaration.children_by_field_name("declarator"):
            initialised = declarator.type == "init_declarator"
            array = declarator.child_by_field_name("declarator") if initialised else declarator
            name = array.child_by_field_name("declarator") if array is not None else None
            if (
                array is not None
                and array.type == "array_declarator"
                and name is not None
                and name.type == "identifier"
            ):
                found.append(ConstantArray(text(name), text(type_node), initialised))
    return tuple(found)


def _is_constant(declaration: Node) -> bool:
    return any(text(child) == "__constant__" for child in declaration.children)
