"""Grid-stride loops: a fixed number of blocks walks the whole array, instead of one thread per element.

`int i = <global index>; if (i < n) { body }` becomes `for (int i = <global index>; i < n; i += blockDim.x *
gridDim.x) { body }`. The loop is then correct for any grid, so the grid can be capped to a few waves of
the GPU's multiprocessors (fewer block launches, better tail) or divided by k (thread coarsening: each
thread handles k elements, one grid stride apart, so accesses stay coalesced).
"""

from __future__ import annotations

import re

from cuda_agent.agent.candidates import Candidate
from cuda_agent.agent.proposers.normal_form import grid_stride_form
from cuda_agent.agent.proposers.transforms.pattern import ThreadPerElement, thread_per_element
from cuda_agent.agent.proposers.tree import (
    Edit,
    KernelTree,
    candidate_from,
    kernel_tree,
    reindent,
    with_grid,
)
from cuda_agent.agent.targets import KernelTarget

PROPOSER = "grid-stride"
# The H200 (and H100 SXM) have 132 multiprocessors. A cap written as a constant keeps the grid the same
# at every problem size, so the verifier's odd sizes exercise the loop too; on a GPU with fewer SMs the
# cap only means more than one wave, never a wrong result.
MULTIPROCESSORS = 132
MAX_THREADS_PER_SM = 2048
COARSENING = (2, 4)
_ONE_BLOCK_PER_THREAD_BLOCK = re.compile(r"\s*(?:ceil_div|cdiv)\((?P<count>.+),\s*block\.x\s*\)\s*")


def propose_grid_stride(target: KernelTarget) -> list[Candidate]:
    tree = kernel_tree(target)
    if tree is None or target.spec is None or len(target.spec.launch.grid) != 1:
        return []
    match = thread_per_element(tree)
    if match is None:
        return _wider_grids(target, tree)
    source = tree.apply_to_file(grid_stride_edits(tree, match))
    launch = target.spec.launch
    grid = launch.grid[0]
    threads = launch.block[0]
    waves = max(1, MAX_THREADS_PER_SM // threads)  # resident blocks an SM holds at this block size
    capped = f"min({grid}, {MULTIPROCESSORS} * {waves})"
    candidates = [
        candidate_from(
            target,
            source,
            description=f"grid-stride loop, grid capped at one wave ({MULTIPROCESSORS} SMs × {waves} blocks)",
            proposer=PROPOSER,
            launch=with_grid(launch, capped),
        )
    ]
    for k in COARSENING:
        candidates.append(
            candidate_from(
                target,
                source,
                description=f"grid-stride loop, {k} elements a thread (grid / {k})",
                proposer=PROPOSER,
                launch=with_grid(launch, coarsened_grid(grid, k)),
            )
        )
    return candidates


def _wider_grids(target: KernelTarget, tree: KernelTree) -> list[Candidate]:
    """A kernel written as a grid-stride loop already, launched on a grid of its own choosing (the CUDA
    introduction's dot product caps it at 32 blocks: a quarter of the SMs idle): the same kernel on a
    grid of one wave, and of a thread for every 4 elements. Only where the block's number and the grid's
    width are read once each, as the loop's start and step: nothing else can depend on the grid."""
    stepped = grid_stride_form(target)
    body = tree.text(tree.body)
    if stepped is None or stepped.spec is None or body.count("blockIdx") != 1 or body.count("gridDim") != 1:
        return []
    assert target.spec is not None
    launch, covering = target.spec.launch, stepped.spec.launch.grid[0]
    waves = max(1, MAX_THREADS_PER_SM // launch.block[0])
    grids = {
        f"min({covering}, {MULTIPROCESSORS} * {waves})": f"one wave ({MULTIPROCESSORS} SMs × {waves} blocks)",
        coarsened_grid(covering, 4): "a thread for every 4 elements",
    }
    return [
        candidate_from(
            target,
            target.source,
            description=f"the grid-stride loop launched on {what} instead of {launch.grid[0]} blocks",
            proposer=PROPOSER,
            launch=with_grid(launch, grid),
        )
        for grid, what in grids.items()
        if grid != launch.grid[0]
    ]


def coarsened_grid(grid: str, k: int) -> str:
    """`ceil_div(n, block.x)` → `ceil_div(n, k * block.x)`; any other grid → `ceil_div(<grid>, k)`."""
    match = _ONE_BLOCK_PER_THREAD_BLOCK.fullmatch(grid)
    if match:
        return f"ceil_div({match['count'].strip()}, {k} * block.x)"
    return f"ceil_div({grid}, {k})"


def grid_stride_edits(tree: KernelTree, match: ThreadPerElement) -> list[Edit]:
    head = (
        f"for ({match.index_type} {match.index} = {tree.text(match.initializer)}; {match.condition}; "
        f"{match.index} += blockDim.x * gridDim.x)"
    )
    if not match.early_return:
        # `int i = ...;\n if (i < n)` → `for (...)`; the guarded statement or block stays as written.
        clause = match.guard.child_by_field_name("condition")
        assert clause is not None
        return [(match.declaration.start_byte, clause.end_byte, head)]
    # `int i = ...; if (i >= n) return; rest...` → the rest, one level deeper, inside the loop.
    indent = tree.indent_at(match.declaration.start_byte)
    unit = tree.indent_unit()
    first = match.statements[0]
    rest = tree.data[first.start_byte : match.end_byte].decode("utf-8")
    body = reindent(rest, indent, indent + unit)
    return [(match.declaration.start_byte, match.end_byte, f"{head} {{\n{body}\n{indent}}}")]
