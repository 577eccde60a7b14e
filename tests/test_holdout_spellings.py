"""Spellings the holdout kernels (bench/kernels/holdout) showed the optimizer passing by, each read as what
it computes:
- a thread index stepping blocks by a constant the launch's block matches (`blockIdx.y * BLOCK +
  threadIdx.y`): the global index, so a batched matrix product so written gets the tiled GEMM rewrite;
- a flat index taken apart (`b = idx / C; c = idx % C`) whose pieces a warp reads one element apart: the
  column walk the y-split rewrite splits;
- a 2-D kernel reading one array down its columns while it reads and writes others along rows (`A + Bᵀ`):
  that array staged through a shared tile loaded along its rows;
- a grid-stride loop launched on a grid of its own choosing (the CUDA introduction's dot product caps it
  at 32 blocks): the same kernel on a grid that fills the GPU.
The gpu-marked test checks that each is verified and faster on the GPU."""

from __future__ import annotations

from pathlib import Path

import pytest
from cuda_agent.agent.device_source import device_source
from cuda_agent.agent.optimize import PROPOSERS
from cuda_agent.agent.proposers.block_width import block_width_form
from cuda_agent.agent.proposers.rewrites import contraction, transposed_tile, y_split
from cuda_agent.agent.proposers.transforms.grid_stride import propose_grid_stride
from cuda_agent.agent.search import _first_round
from cuda_agent.agent.targets import KernelTarget, load_targets
from cuda_agent.sandbox.compile import compile_kernel

from tests.test_rewrite_warp_per_output import needs_compiler, shown

HOLDOUT = Path(__file__).resolve().parents[1] / "bench" / "kernels" / "holdout"


def holdout(stem: str, source: str | None = None) -> KernelTarget:
    path = HOLDOUT / f"{stem}.cu"
    (target,) = load_targets(path, source).targets
    return target


def first_round(target: KernelTarget) -> list:
    return [c for group in _first_round(target, PROPOSERS, []) for c in group]


BMM = (HOLDOUT / "bmm_naive.cu").read_text()


@needs_compiler
def test_a_block_width_macro_is_read_as_the_blocks_width() -> None:
    target = holdout("bmm_naive")
    assert contraction.propose(target) == []  # as written: `blockIdx.y * BLOCK` is not the global index
    sized = block_width_form(target)
    assert sized is not None
    assert "int row = blockIdx.y * blockDim.y + threadIdx.y;" in sized.source
    assert "int col = blockIdx.x * blockDim.x + threadIdx.x;" in sized.source
    tiled = [c for c in first_round(target) if c.proposer == contraction.PROPOSER]
    assert tiled and "tiled contraction over k" in tiled[0].description
    assert tiled[0].launch is not None and tiled[0].launch.grid[2] == "batch"  # the batch kept on z
    assert compile_kernel(device_source(tiled[0].source), "bmm_naive").ok


@pytest.mark.parametrize(
    ("change", "why"),
    [
        (("[launch]\nblock = [16, 16]", "[launch]\nblock = [32, 8]"), "the launch's block is not BLOCK wide"),
        (("float acc = 0.0f;", "__shared__ float tile[BLOCK];\n        float acc = 0.0f;"), "a shared tile"),
        (("++k) {", "k += 1) { if (threadIdx.x >= BLOCK) break;"), "BLOCK read as a width elsewhere"),
    ],
)
def test_a_block_width_is_left_as_written_where_it_may_mean_more(change: tuple[str, str], why: str) -> None:
    source = BMM.replace(*change)
    assert source != BMM
    assert block_width_form(holdout("bmm_naive", source)) is None, why


def test_a_literal_and_a_file_constant_are_block_widths_too() -> None:
    literal = BMM.replace("blockIdx.y * BLOCK", "blockIdx.y * 16").replace(
        "blockIdx.x * BLOCK", "16 * blockIdx.x"
    )
    sized = block_width_form(holdout("bmm_naive", literal))
    assert sized is not None and "blockDim.x * blockIdx.x + threadIdx.x" in sized.source
    constant = BMM.replace("#define BLOCK 16", "constexpr int BLOCK = 16;")
    sized = block_width_form(holdout("bmm_naive", constant))
    assert sized is not None and "blockIdx.y * blockDim.y + threadIdx.y" in sized.source


@needs_compiler
def test_a_flat_index_taken_apart_is_split_along_y_where_a_warp_reads_along_c() -> None:
    target = holdout("mean_over_time")
    candidates = y_split.propose(target)
    assert [c.launch.block for c in candidates if c.launch] == [(32, 8), (32, 32), (16, 64)]
    assert "sum += inp[b * T * C + t * C + c];" in candidates[0].source
    assert compile_kernel(device_source(candidates[0].source), "mean_over_time").ok
    # a piece that moves C elements a lane (`idx / C` read along a row) is no column walk
    rows = target.source.replace("inp[b * T * C + t * C + c]", "inp[(b * C + c) * T + t]")
    assert y_split.propose(holdout("mean_over_time", rows)) == []


def test_a_grid_stride_loop_on_a_capped_grid_is_offered_a_full_one() -> None:
    target = holdout("dot_product")
    grids = {c.launch.grid[0]: c.description for c in propose_grid_stride(target) if c.launch}
    assert set(grids) == {"min(ceil_div(N, block.x), 132 * 8)", "ceil_div(N, 4 * block.x)"}
    assert "instead of min(32, ceil_div(N, 256)) blocks" in next(iter(grids.values()))
    # the grid read elsewhere (a block's partial sum stored at its own place): the grid is the user's
    partials = target.source.replace("atomicAdd(c, cache[0]);", "c[blockIdx.x] = cache[0];")
    assert propose_grid_stride(holdout("dot_product", partials)) == []


@needs_compiler
def test_a_read_down_the_columns_is_staged_through_a_shared_tile() -> None:
    target = holdout("transpose_add")
    (candidate,) = transposed_tile.propose(target)
    assert candidate.launch is not None and candidate.launch.block == (32, 8)
    assert candidate.launch.grid == ("ceil_div(n, 32)", "ceil_div(n, 32)")
    assert "B_tile[k][threadIdx.x] = B[col * n + row];" in candidate.source
    assert "C[row * n + col] = A[row * n + col] + B_tile[threadIdx.x][k];" in candidate.source
    assert compile_kernel(device_source(candidate.source), "add_transposed").ok
    sum_ = "C[row * n + col] = A[row * n + col] + B[col * n + row];"
    early = target.source.replace(
        f"    if (row < n && col < n) {{\n        {sum_}\n    }}",
        f"    if (row >= n || col >= n) return;\n    {sum_}",
    )
    assert early != target.source
    (candidate,) = transposed_tile.propose(holdout("transpose_add", early))
    assert "if (row >= n || col >= n) continue;" in candidate.source  # the thread's other outputs still run
    assert compile_kernel(device_source(candidate.source), "add_transposed").ok


@pytest.mark.parametrize(
    ("change", "why"),
    [
        (("B[col * n + row]", "B[row * n + col]"), "nothing is read down a column"),
        (
            ("A[row * n + col] + B[col * n + row]", "(A[row * n + col] > 0 ? B[col * n + row] : 0)"),
            "read under a condition",
        ),
        (("C[row * n + col] =", "C[col * n + row] ="), "a store down a column (the transpose idiom's case)"),
    ],
)
def test_a_tile_is_not_staged_where_it_would_not_hold(change: tuple[str, str], why: str) -> None:
    source = (HOLDOUT / "transpose_add.cu").read_text().replace(*change)
    assert transposed_tile.propose(holdout("transpose_add", source)) == [], why


@pytest.mark.gpu
def test_the_holdout_spellings_verify_and_are_faster_on_the_gpu() -> None:
    from cuda_agent.agent.engine import Engine, EngineSettings

    cases = {
        "bmm_naive": lambda t: [c for c in first_round(t) if c.proposer == contraction.PROPOSER][:2],
        "mean_over_time": lambda t: y_split.propose(t)[:2],
        "dot_product": propose_grid_stride,
        "transpose_add": transposed_tile.propose,
    }
    with Engine(EngineSettings(use_cache=False, input_sets=2)) as engine:
        for stem, propose in cases.items():
            target = holdout(stem)
            baseline = engine.baseline(target)
            assert baseline.usable, baseline.error
            results = engine.evaluate(baseline, propose(target))
            seen = shown(baseline.target, results)
            print(stem, seen)
            assert results and all(r.verified for r in results), seen
            assert any(r.status == "faster" for r in results), seen
