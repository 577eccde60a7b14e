"""A 2-D kernel whose x index walks memory a row at a time -> x and y swapped, so that neighbouring
threads of a warp touch neighbouring addresses.

Driven by the analysis' coalescing model (a warp's access costs one line as a broadcast or as
neighbours, a line a thread at a stride): offered where some access costs less with the y stride along
the warp than with the x stride and none costs more. The case it is for: `a[i * n + j]` with i from
threadIdx.x, a warp reading 32 elements a row apart, 32 transactions where one would do (column-major
code, images indexed [x][y], a first draft that put the row on x). Swapping every threadIdx, blockIdx,
blockDim and gridDim `.x` with its `.y` in the body, and the grid's two counts, gives each thread the
other axis' role: every (i, j) is still computed by one thread, now with j along the warp.

Not offered where threads of a warp work together (shuffles, votes, `warpSize`, cooperative groups): a
warp is made of other threads after the swap. Indices that step blocks by a number (`blockIdx.x * 16`)
keep their blocks only if the block is swapped too: then it is (its y, its x).
"""

from __future__ import annotations

import re

from cuda_agent.agent.analysis import KernelFacts, analysed
from cuda_agent.agent.analysis.forms import Form
from cuda_agent.agent.candidates import Candidate
from cuda_agent.agent.proposers.tree import KernelTree, build_candidate
from cuda_agent.agent.spec import LaunchSpec
from cuda_agent.agent.targets import KernelTarget
from tree_sitter import Node

PROPOSER = "rewrite:swap-axes"
_BUILTINS = ("threadIdx", "blockIdx", "blockDim", "gridDim")
_SWAPPED = {"x": "y", "y": "x"}
# What makes a warp's threads depend on each other: their grouping must not change.
WARP_WORK = re.compile(
    r"\b(__shfl\w*|__ballot\w*|__any\w*|__all\w*|__activemask|__syncwarp|__match\w*|__reduce_\w+_sync"
    r"|warpSize|cooperative_groups|tiled_partition|coalesced_threads|thread_block_tile|__syncthreads_\w+)\b"
)


def propose(target: KernelTarget) -> list[Candidate]:
    found = analysed(target)
    spec = target.spec
    if found is None or spec is None or len(spec.launch.block) < 2 or len(spec.launch.grid) < 2:
        return []
    tree, facts = found
    if WARP_WORK.search(tree.text(tree.body)) or not _strided_along_x(facts):
        return []
    block = _block_after(facts, spec.launch.block)
    if block is None:
        return []
    grid = (_swapped(spec.launch.grid[1]), _swapped(spec.launch.grid[0]), *spec.launch.grid[2:])
    launch = LaunchSpec(block=block, grid=grid, shared_bytes=_swapped(spec.launch.shared_bytes))
    return [
        build_candidate(
            tree,
            body=tree.substituted(tree.body, lambda node: _other_axis(tree, node)),
            launch=launch,
            description="x and y swapped: neighbouring threads of a warp take neighbouring elements "
            "(the x index had stepped a row at a time)",
            proposer=PROPOSER,
        )
    ]


def _strided_along_x(facts: KernelFacts) -> bool:
    """Whether the swap helps: no access costs more with the y stride along the warp than with the x
    stride, and some cost less."""
    if not facts.accesses:
        return False
    better = False
    for access in facts.accesses:
        along_x, along_y = access.stride("threadIdx.x"), access.stride("threadIdx.y")
        if along_x is None or along_y is None:
            return False
        before, after = _cost(along_x), _cost(along_y)
        if after > before:
            return False
        better = better or after < before
    return better


def _cost(stride: Form) -> int:
    """A warp's transactions, in order: 1 for one element or neighbours (a broadcast or one 128-byte
    line), 2 for a stride (a line a thread)."""
    value = stride.value()
    return 1 if value is not None and abs(value) <= 1 else 2


def _block_after(facts: KernelFacts, block: tuple[int, ...]) -> tuple[int, ...] | None:
    """The block after the swap: as it was where the indices step blocks by blockDim (the grid's counts
    follow block.x and block.y), swapped where they step by numbers; None where that is unclear."""
    steps = set()
    for index in facts.indices:
        for axis in ("x", "y"):
            step = index.form.coefficient(f"blockIdx.{axis}")
            if step is None or not step.terms:
                continue
            steps.add("dim" if step == Form.atom(f"blockDim.{axis}") else step.value())
    if steps <= {"dim"}:
        return block
    if "dim" in steps or None in steps:
        return None
    return (block[1], block[0], *block[2:])


def _other_axis(tree: KernelTree, node: Node) -> str | None:
    """`threadIdx.x` as `threadIdx.y` and the other way round; blockIdx, blockDim and gridDim too."""
    if node.type != "field_expression":
        return None
    argument, field = node.child_by_field_name("argument"), node.child_by_field_name("field")
    if argument is None or field is None or tree.text(argument) not in _BUILTINS:
        return None
    axis = tree.text(field)
    return f"{tree.text(argument)}.{_SWAPPED[axis]}" if axis in _SWAPPED else None


def _swapped(expression: str) -> str:
    """A launch expression with block.x and block.y exchanged."""
    return re.sub(r"\bblock\.([xy])\b", lambda m: f"block.{_SWAPPED[m.group(1)]}", expression)
