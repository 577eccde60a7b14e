"""The `__constant__` arrays of a file that host code fills: inputs no spec argument describes.

Course and sample code keeps a convolution's mask or a filter's weights in constant memory
(`__constant__ float M[MASK_DIM * MASK_DIM];`, set with cudaMemcpyToSymbol before the launch). Nothing
launches the host code here, so the array would hold zeros: the original would compute as if every
weight were 0, and a rewrite that reads the weights wrongly would still match it. The sandbox fills each
floating-point one found here with values drawn from its name (sandbox/plan.py `ConstantInput`).

Found at the file's top level only, without an initialiser (one that has its values in the source keeps
them) (a namespace's would be a mangled symbol in the cubin), with an
element type the spec's dtypes name. Integer ones are left alone: they are often index tables
(neighbour offsets), which random values would send out of bounds.
"""

from __future__ import annotations

from cuda_agent.agent.analysis.values import text
from cuda_agent.agent.memo import BoundedMemo
from cuda_agent.agent.parsing import parse_cuda
from cuda_agent.agent.spec.dtypes import dtype_of_c_type, is_float
from cuda_agent.sandbox.plan import ConstantInput
from tree_sitter import Node

_FOUND: BoundedMemo[str, tuple[ConstantInput, ...]] = BoundedMemo(64)


def constant_inputs(source: str) -> tuple[ConstantInput, ...]:
    """The file's floating-point `__constant__` arrays, in the order declared."""
    if "__constant__" not in source:
        return ()
    return _FOUND.get_or_make(source, lambda: _found(source))


def constant_arrays(source: str) -> frozenset[str]:
    """Every top-level `__constant__` array of the file (initialised, integer ones too): what device code
    can only read."""
    if "__constant__" not in source:
        return frozenset()
    return frozenset(
        text(name)
        for declaration in parse_cuda(source).root_node.named_children
        if declaration.type == "declaration" and _is_constant(declaration)
        for declarator in declaration.children_by_field_name("declarator")
        for array in (
            declarator.child_by_field_name("declarator")
            if declarator.type == "init_declarator"
            else declarator,
        )
        if array is not None and array.type == "array_declarator"
        for name in (array.child_by_field_name("declarator"),)
        if name is not None and name.type == "identifier"
    )


def _found(source: str) -> tuple[ConstantInput, ...]:
    found = []
    for declaration in parse_cuda(source).root_node.named_children:
        if declaration.type != "declaration" or not _is_constant(declaration):
            continue
        type_node = declaration.child_by_field_name("type")
        dtype = dtype_of_c_type(text(type_node)) if type_node is not None else None
        if dtype is None or not is_float(dtype):
            continue
        for array in declaration.children_by_field_name("declarator"):  # an initialised one has its values
            name = array.child_by_field_name("declarator") if array.type == "array_declarator" else None
            if name is not None and name.type == "identifier":
                found.append(ConstantInput(text(name), dtype))  # type: ignore[arg-type]
    return tuple(found)


def _is_constant(declaration: Node) -> bool:
    return any(text(child) == "__constant__" for child in declaration.children)
