"""A block size written as a macro (`#define BLOCK_SIZE 512`), tuned with the block.

Public kernels fix their block in a macro and use it for it: the size of a `__shared__` array indexed
by the thread, the stride of a loop, `blockIdx.x * BLOCK_SIZE + threadIdx.x`. Launched with another
block, such a kernel computes something else, so the launch tuner's every candidate would fail its
verification. Here each candidate block also rewrites the macro's value, when the macro is the kernel's
alone (no other function in the file reads it) and its value is the block's thread count (1-D) or its
side (a square 2-D block, for a tile macro). A spec grid written with the old number
(`ceil_div(n, 512)`) is written with `block.x` instead: the verifier checks what that assumes.
"""

from __future__ import annotations

import math
import re
from dataclasses import dataclass

from cuda_agent.agent.analysis.values import file_definitions
from cuda_agent.agent.analysis.values import text as node_text
from cuda_agent.agent.device_source import replace_span
from cuda_agent.agent.kernels import Span
from cuda_agent.agent.parsing import parse_cuda
from cuda_agent.agent.proposers.tree import KernelTree, identifiers, kernel_tree, walk
from cuda_agent.agent.spec import LaunchSpec
from cuda_agent.agent.targets import KernelTarget
from tree_sitter import Node


@dataclass(frozen=True)
class BlockMacro:
    name: str
    how: str  # how the kernel uses it, for the description: "as a __shared__ array's size"
    square: bool  # the side of a square 2-D block, not the thread count

    def value(self, block: tuple[int, ...]) -> int:
        return block[0] if self.square else math.prod(block)

    def fits(self, block: tuple[int, ...]) -> bool:
        """Whether the block is one the macro can describe (a square for a tile's side)."""
        return not self.square or (len(block) >= 2 and block[0] == block[1])


def block_macro(target: KernelTarget, uses: dict[str, str]) -> BlockMacro | None:
    """The macro that is the kernel's block size, given the names the kernel uses as one (`uses`, see
    launch_config._block_size_uses), or None."""
    tree = kernel_tree(target)
    if tree is None or target.spec is None:
        return None
    block = target.spec.launch.block
    others = _read_elsewhere(tree)
    for name, value in _numeric_defines(tree.root).items():
        how = uses.get(name) or _index_use(tree, name)
        if how is None or name in others:
            continue
        if len(block) == 1 or all(b == 1 for b in block[1:]):
            if value == math.prod(block):
                return BlockMacro(name, how, square=False)
        elif block[0] == block[1] == value and all(b == 1 for b in block[2:]):
            return BlockMacro(name, how, square=True)
    return None


def with_macro(target: KernelTarget, macro: BlockMacro, text: str, block: tuple[int, ...]) -> str | None:
    """`text` (the target's file with its launch already written for `block`) with the macro's
    `#define` set to the block; None when the define cannot be found in it again."""
    data = text.encode("utf-8")
    root = parse_cuda(data).root_node
    for node in walk(root):
        if node.type != "preproc_def":
            continue
        name, value = node.child_by_field_name("name"), node.child_by_field_name("value")
        if name is None or value is None or data[name.start_byte : name.end_byte].decode() != macro.name:
            continue
        written = data[value.start_byte : value.end_byte].decode("utf-8")
        number = re.match(r"\s*\(?\s*(\d+)", written)
        if number is None:
            return None
        start = value.start_byte + number.start(1)
        span = Span(start, start + len(number.group(1)), 0, 0, 0, 0)
        return replace_span(text, span, str(macro.value(block)))
    return None


def grid_with_block(launch: LaunchSpec, old: tuple[int, ...], macro: BlockMacro) -> tuple[str, ...]:
    """The spec's grid with the old block's number written as `block.x` (`ceil_div(n, 512)` with block
    [512]), so that it follows the block as the kernel now does."""
    number = str(macro.value(old))
    axes = ("block.x", "block.y") if macro.square else ("block.x",)
    grid = list(launch.grid)
    for axis, written in enumerate(grid[: len(axes)]):
        grid[axis] = re.sub(rf"(?<![\w.]){number}(?![\w.])", axes[axis], written)
    return tuple(grid)


def _numeric_defines(root: Node) -> dict[str, int]:
    """The file's `#define NAME 256`s (agent/analysis/values.py reads them), by name."""
    found: dict[str, int] = {}
    for name, value in file_definitions(root).constants.items():
        number = re.fullmatch(r"\(?\s*(\d+)[uU]?\s*\)?", node_text(value).strip())
        if number is not None:
            found[name] = int(number.group(1))
    return found


def _read_elsewhere(tree: KernelTree) -> set[str]:
    """Names read by any other function of the file (another kernel, a helper, the host code)."""
    names: set[str] = set()
    for node in walk(tree.root):
        if node.type == "function_definition" and node != tree.definition:
            names |= identifiers(node)
    return names


def _index_use(tree: KernelTree, name: str) -> str | None:
    """`blockIdx.x * NAME`: the macro stands for blockDim.x in the kernel's indexing."""
    for node in walk(tree.body):
        if node.type != "binary_expression":
            continue
        operator = node.child_by_field_name("operator")
        if operator is None or operator.type != "*":
            continue
        sides = {
            "".join(tree.text(c).split())
            for c in (node.child_by_field_name("left"), node.child_by_field_name("right"))
            if c is not None
        }
        if name in sides and any(s.startswith("blockIdx.") for s in sides):
            return "as the block's size in its index"
    return None
