"""A thread index that steps blocks by a constant, read as stepping them by the block's width.

First drafts often write the global index with the block's width as a number or a macro
(`int row = blockIdx.y * TILE_WIDTH + threadIdx.y;`, `blockIdx.x * 16 + threadIdx.x`). Under the launch
whose block is that wide it is `blockIdx.y * blockDim.y + threadIdx.y`, the spelling the analysis-driven
rewrites read as "a thread per row"; and a rewrite that launches other blocks needs it so spelled. Read so
only where nothing else in the kernel can hold the width: no `__shared__` array (a tile sized by it), and
a named width read nowhere but in such indices.
"""

from __future__ import annotations

import re

from cuda_agent.agent.analysis.preprocessor import kernel_definitions
from cuda_agent.agent.analysis.slot_tree import integer_value
from cuda_agent.agent.analysis.values import text
from cuda_agent.agent.memo import BoundedMemo
from cuda_agent.agent.parsing import parse_cuda, walk
from cuda_agent.agent.proposers.tree import Edit, kernel_tree
from cuda_agent.agent.targets import KernelTarget, reloaded_target
from tree_sitter import Node

_FORMS: BoundedMemo[tuple[str, str, int, tuple[int, ...]], tuple[KernelTarget | None]] = BoundedMemo(64)
_BLOCK_INDEX = re.compile(r"blockIdx\.([xyz])")
_SPACES = re.compile(r"[\s()]")


def block_width_form(target: KernelTarget) -> KernelTarget | None:
    """The kernel with its thread indices' constant block widths written `blockDim.x` (`.y`, `.z`) where
    the spec's block is that wide; None where it has none (or another use of the width forbids it)."""
    if target.spec is None or "blockIdx" not in target.source:
        return None
    key = (str(target.path), target.source, target.kernel.start_byte, target.spec.launch.block)
    return _FORMS.get_or_make(key, lambda: (_sized(target),))[0]


def _sized(target: KernelTarget) -> KernelTarget | None:
    assert target.spec is not None
    tree = kernel_tree(target)
    if tree is None or any(text(n) == "__shared__" for n in walk(tree.body)):
        return None
    widths = _file_constants(target) | kernel_definitions(tree).constants
    edits: list[Edit] = []
    named: set[str] = set()
    for product in walk(tree.body):
        width = _block_width(product)
        if width is None or not _in_index(product):
            continue
        axis, operand = width
        at = "xyz".index(axis)
        extent = target.spec.launch.block[at] if at < len(target.spec.launch.block) else 1
        value = integer_value(operand, widths)
        if extent <= 1 or value != extent:
            continue
        if operand.type == "identifier":
            named.add(text(operand))
        edits.append((operand.start_byte, operand.end_byte, f"blockDim.{axis}"))
    if not edits:
        return None
    edited = {start for start, _, _ in edits}
    for name in named:  # the width read elsewhere (a loop's step, a check): it means the width there too
        uses = [n for n in walk(tree.body) if n.type == "identifier" and text(n) == name]
        if any(n.start_byte not in edited for n in uses):
            return None
    data = target.source.encode("utf-8")
    for begin, end, written in sorted(edits, reverse=True):
        data = data[:begin] + written.encode("utf-8") + data[end:]
    sized = reloaded_target(target, data.decode("utf-8"))
    return sized if sized is not None and sized.spec is not None else None


def _block_width(node: Node) -> tuple[str, Node] | None:
    """(axis, the width) of `blockIdx.x * W` or `W * blockIdx.x`, W a number or a name."""
    operator = node.child_by_field_name("operator") if node.type == "binary_expression" else None
    if operator is None or text(operator) != "*":
        return None
    left, right = node.child_by_field_name("left"), node.child_by_field_name("right")
    if left is None or right is None:
        return None
    for index, width in ((left, right), (right, left)):
        found = _BLOCK_INDEX.fullmatch(_SPACES.sub("", text(index)))
        if found and width.type in ("number_literal", "identifier"):
            return found.group(1), width
    return None


def _in_index(product: Node) -> bool:
    """Whether the product is a term of `... + threadIdx.x` of the same axis, directly (the global index,
    not a block's first element used some other way)."""
    parent = product.parent
    while parent is not None and parent.type == "parenthesized_expression":
        parent = parent.parent
    operator = parent.child_by_field_name("operator") if parent is not None else None
    if parent is None or operator is None or text(operator) != "+":
        return False
    found = _block_width(product)
    assert found is not None
    others = [parent.child_by_field_name(side) for side in ("left", "right")]
    return any(c is not None and _SPACES.sub("", text(c)) == f"threadIdx.{found[0]}" for c in others)


def _file_constants(target: KernelTarget) -> dict[str, Node]:
    """The values of the file's top-level `const int TILE = 16;` (`constexpr`, `static const`), by name:
    named widths as `#define`s are (`kernel_definitions`)."""
    found: dict[str, Node] = {}
    for node in parse_cuda(target.source).root_node.named_children:
        if node.type != "declaration" or not any(text(c) in ("const", "constexpr") for c in walk(node)):
            continue
        for declarator in node.children_by_field_name("declarator"):
            name, value = (
                declarator.child_by_field_name("declarator"),
                declarator.child_by_field_name("value"),
            )
            if declarator.type == "init_declarator" and name is not None and value is not None:
                found[text(name)] = value
    return found
