"""Shared-tile padding: the column a warp walks down gets its own bank per row, and nothing else changes."""

from __future__ import annotations

from pathlib import Path

import pytest
from cuda_agent.agent.proposers.transforms.shared_padding import propose_shared_padding

from tests.test_transforms import assert_compiles, changed_lines, target_of

SPEC = """\
/* cuda-agent
[sizes]
rows = 1000
cols = 777
[args]
src = { role = "input", dtype = "float32", shape = ["rows", "cols"] }
dst = { role = "output", dtype = "float32", shape = ["cols", "rows"] }
rows = { role = "scalar", dtype = "int32", value = "rows" }
cols = { role = "scalar", dtype = "int32", value = "cols" }
[launch]
block = [32, 32]
grid = ["ceil_div(cols, 32)", "ceil_div(rows, 32)"]
[verify]
oracle = { dst = "src.T" }
*/
__global__ void t(const float* src, float* dst, int rows, int cols)
{
    __shared__ float tile[32][32];
    int tx = threadIdx.x, ty = threadIdx.y;
    int col = blockIdx.x * 32 + tx, row = blockIdx.y * 32 + ty;
    if (row < rows && col < cols) tile[ty][tx] = src[row * cols + col];
    __syncthreads();
    int out_col = blockIdx.y * 32 + tx, out_row = blockIdx.x * 32 + ty;
    if (out_row < cols && out_col < rows) dst[out_row * rows + out_col] = %s;
}
"""


def test_a_tile_read_down_its_columns_gets_one_padding_column(tmp_path: Path) -> None:
    target = target_of(tmp_path, SPEC % "tile[tx][ty]")
    (candidate,) = propose_shared_padding(target)
    assert changed_lines(target.source, candidate.source) == [
        ("    __shared__ float tile[32][32];", "    __shared__ float tile[32][32 + 1];")
    ]
    assert "tile[][32 + 1]" in candidate.description and candidate.launch is None
    assert_compiles(target, candidate)


@pytest.mark.parametrize(
    "read",
    [
        "tile[ty][tx]",  # read along rows only: no conflict to remove
        "(&tile[0][0])[tx * 32 + ty]",  # the flat layout is used: padding would change what it reads
    ],
)
def test_tiles_left_alone_when_padding_cannot_help_or_would_be_seen(tmp_path: Path, read: str) -> None:
    assert propose_shared_padding(target_of(tmp_path, SPEC % read)) == []
