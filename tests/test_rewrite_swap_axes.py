"""x and y swapped where the x index walks memory a row at a time (the row on x, column-major images,
`out[r * cols + c]` with r from threadIdx.x): offered only where every access is one element apart along
y and more than one along x, never where a warp's threads work together; the launch's counts and, for
indices stepping blocks by numbers, the block swap too. The gpu-marked test checks results and speed."""

from __future__ import annotations

from pathlib import Path

import pytest
from cuda_agent.agent import optimize
from cuda_agent.agent.device_source import device_source
from cuda_agent.agent.proposers.rewrites import swap_axes
from cuda_agent.agent.targets import KernelTarget, load_targets
from cuda_agent.sandbox.compile import compile_kernel

from tests.test_rewrite_warp_per_output import body_of, needs_compiler, shown

# A first draft that put the row index on x: a warp's 32 threads read 32 rows, `cols` floats apart.
ROWS_ON_X = """
__global__ void scale_rows(const float* in, float* out, int rows, int cols) {
    int r = blockIdx.x * blockDim.x + threadIdx.x;
    int c = blockIdx.y * blockDim.y + threadIdx.y;
    if (r < rows && c < cols) out[r * cols + c] = 2.f * in[r * cols + c];
}
"""
# The same with 16 x 16 tiles stepped by a #define, and a shared row of weights: the block is swapped too.
TILED = """
#define TILE 16
__global__ void weight_rows(const float* in, const float* w, float* out, int rows, int cols) {
    int r = blockIdx.x * TILE + threadIdx.x;
    int c = blockIdx.y * TILE + threadIdx.y;
    if (r < rows && c < cols) out[r * cols + c] = w[r * cols + c] * in[r * cols + c];
}
"""


def target_of(source: str, tmp_path: Path, name: str = "k.cu") -> KernelTarget:
    path = tmp_path / name
    path.write_text(source)
    (target,) = load_targets(path).targets
    assert target.spec is not None, target.note
    return target


@needs_compiler
def test_the_row_on_x_becomes_the_row_on_y_and_the_grid_follows(tmp_path: Path) -> None:
    target = target_of(ROWS_ON_X, tmp_path)
    assert target.spec is not None and target.spec.launch.grid[0] == "ceil_div(rows, block.x)"
    (candidate,) = swap_axes.propose(target)
    body = body_of(candidate, "scale_rows")
    assert "int r = blockIdx.y * blockDim.y + threadIdx.y;" in body
    assert "int c = blockIdx.x * blockDim.x + threadIdx.x;" in body
    assert candidate.launch is not None
    assert candidate.launch.grid == ("ceil_div(cols, block.x)", "ceil_div(rows, block.y)")
    assert candidate.launch.block == target.spec.launch.block  # counted in blockDim: any block covers it
    assert compile_kernel(device_source(candidate.source), "scale_rows").ok
    # through the optimizer's table, the new launch is written into the file's spec
    (written,) = optimize.PROPOSERS[swap_axes.PROPOSER](target)
    reread = load_targets(target.path, written.source).find("scale_rows")
    assert reread is not None and reread.spec is not None
    assert reread.spec.launch.grid == ("ceil_div(cols, block.x)", "ceil_div(rows, block.y)")


@needs_compiler
def test_blocks_stepped_by_a_number_are_swapped_with_the_indices(tmp_path: Path) -> None:
    target = target_of(TILED, tmp_path)
    assert target.spec is not None
    (candidate,) = swap_axes.propose(target)
    assert "int r = blockIdx.y * TILE + threadIdx.y;" in body_of(candidate, "weight_rows")
    assert candidate.launch is not None
    assert candidate.launch.block == tuple(reversed(target.spec.launch.block))
    assert compile_kernel(device_source(candidate.source), "weight_rows").ok


@needs_compiler
def test_a_vector_read_along_the_other_axis_does_not_stop_it(tmp_path: Path) -> None:
    """A per-column weight (`w[c]`, the same for a warp's rows before, neighbours after) and a per-row
    one (`b[r]`: neighbours before, one element after) cost no more swapped: still offered."""
    source = ROWS_ON_X.replace("2.f * in[r * cols + c]", "w[c] * in[r * cols + c] + b[r]").replace(
        "const float* in,", "const float* in, const float* w, const float* b,"
    )
    (candidate,) = swap_axes.propose(target_of(source, tmp_path))
    assert compile_kernel(device_source(candidate.source), "scale_rows").ok


@pytest.mark.parametrize(
    ("source", "why"),
    [
        (
            ROWS_ON_X.replace("out[r * cols + c]", "out[c * rows + r]").replace(
                "in[r * cols + c]", "in[c * rows + r]"
            ),
            "already coalesced along x",
        ),
        (
            ROWS_ON_X.replace(
                "2.f * in[r * cols + c]", "2.f * __shfl_xor_sync(0xffffffff, in[r * cols + c], 1)"
            ),
            "a warp's threads exchange values",
        ),
        (ROWS_ON_X.replace("in[r * cols + c]", "in[c * rows + r]"), "one access is coalesced along x"),
    ],
)
def test_not_offered_where_x_is_already_along_memory_or_a_warp_works_together(
    source: str, why: str, tmp_path: Path
) -> None:
    assert swap_axes.propose(target_of(source, tmp_path)) == [], why


@pytest.mark.gpu
def test_the_swapped_kernel_verifies_and_is_faster_on_the_gpu(tmp_path: Path) -> None:
    from cuda_agent.agent.engine import Engine, EngineSettings

    with Engine(EngineSettings(use_cache=False, input_sets=2)) as engine:
        for source, name in ((ROWS_ON_X, "rows.cu"), (TILED, "tiled.cu")):
            target = target_of(source, tmp_path, name)
            baseline = engine.baseline(target)
            assert baseline.usable, baseline.error
            results = engine.evaluate(baseline, optimize.PROPOSERS[swap_axes.PROPOSER](target))
            seen = shown(baseline.target, results)
            assert results and all(r.verified and r.status == "faster" for r in results), seen
