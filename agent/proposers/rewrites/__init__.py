"""Rewrites driven by the kernel analysis (agent/analysis/): each applies wherever the facts it needs
hold, whatever the spelling, and brings its own launch (`Candidate.launch`). Like the idioms, each
module's `propose(target)` returns candidates, empty where it does not apply."""

from __future__ import annotations

from collections.abc import Callable

from cuda_agent.agent.candidates import Candidate
from cuda_agent.agent.proposers.rewrites import (
    atomic_sum,
    block_coarsen,
    block_to_loop,
    coarsen,
    contraction,
    fuse_passes,
    held_row,
    implicit_gemm,
    inline_helper,
    look_back,
    max_then_sum,
    promote,
    row_blocks,
    row_loop,
    row_registers,
    row_stage,
    shared_loop,
    shuffle_tree,
    stride_loop,
    swap_axes,
    transposed_tile,
    untile,
    vector_loop,
    warp_per_output,
    warp_scan,
    window_tile,
    word_spans,
    y_split,
)
from cuda_agent.agent.targets import KernelTarget

REWRITE_PROPOSERS: dict[str, Callable[[KernelTarget], list[Candidate]]] = {
    contraction.PROPOSER: contraction.propose,
    implicit_gemm.PROPOSER: implicit_gemm.propose,
    untile.PROPOSER: untile.propose,
    warp_per_output.PROPOSER: warp_per_output.propose,
    warp_scan.PROPOSER: warp_scan.propose,
    # before row-stage: where a thread's registers hold its share of the row, no shared memory at all
    row_registers.PROPOSER: row_registers.propose,
    row_stage.PROPOSER: row_stage.propose,
    y_split.PROPOSER: y_split.propose,
    row_blocks.PROPOSER: row_blocks.propose,
    swap_axes.PROPOSER: swap_axes.propose,
    transposed_tile.PROPOSER: transposed_tile.propose,
    window_tile.PROPOSER: window_tile.propose,
    coarsen.PROPOSER: coarsen.propose,
    word_spans.PROPOSER: word_spans.propose,
    vector_loop.PROPOSER: vector_loop.propose,
    stride_loop.PROPOSER: stride_loop.propose,
    promote.PROPOSER: promote.propose,
    held_row.PROPOSER: held_row.propose,
    atomic_sum.PROPOSER: atomic_sum.propose,
    inline_helper.PROPOSER: inline_helper.propose,
    # before shared-loop and block-coarsen: where it applies, its chain (a warp a block, 16-byte loads)
    # leaves no barrier at all, which theirs keep
    block_to_loop.PROPOSER: block_to_loop.propose,
    row_loop.PROPOSER: row_loop.propose,
    # before shared-loop: where it applies, a block reads its own share instead of all before it
    look_back.PROPOSER: look_back.propose,
    shared_loop.PROPOSER: shared_loop.propose,
    fuse_passes.PROPOSER: fuse_passes.propose,
    max_then_sum.PROPOSER: max_then_sum.propose,
    block_coarsen.PROPOSER: block_coarsen.propose,
    shuffle_tree.PROPOSER: shuffle_tree.propose,
}

__all__ = ["REWRITE_PROPOSERS"]
