"""A block per row whose threads stride over the row -> several blocks per row along y: offered where the
row's iterations are independent and every store is in that loop, never for a reduction, a store after
the loop, a thread index read in the body, shared memory or a barrier; the grid gains the row's parts,
and the 16-byte rewrite chains onto the shared loop. The gpu-marked test checks results and speed."""

from __future__ import annotations

from pathlib import Path

import pytest
from cuda_agent.agent import optimize
from cuda_agent.agent.device_source import device_source
from cuda_agent.agent.proposers.rewrites import row_blocks, vector_loop
from cuda_agent.agent.targets import load_targets
from cuda_agent.sandbox.compile import compile_kernel

from tests.test_rewrite_swap_axes import target_of
from tests.test_rewrite_warp_per_output import body_of, needs_compiler, shown

# A decode step's bias and activation: a handful of tokens, each row a block, the threads striding over
# the hidden size. Eight blocks keep eight SMs busy.
FEW_LONG_ROWS = """
/* cuda-agent
[sizes]
tokens = 8
hidden = 2097152
[args]
out  = { role = "output", dtype = "float32", shape = ["tokens", "hidden"] }
x    = { role = "input",  dtype = "float32", shape = ["tokens", "hidden"] }
bias = { role = "input",  dtype = "float32", shape = ["hidden"] }
hidden = { role = "scalar", dtype = "int32", value = "hidden" }
[launch]
block = [256]
grid = ["tokens"]
[verify]
sizes = [{ tokens = 3, hidden = 1001 }]
*/
__global__ void bias_relu(float* out, const float* x, const float* bias, int hidden)
{
    const float* row = x + (size_t)blockIdx.x * hidden;
    float* dst = out + (size_t)blockIdx.x * hidden;
    for (int j = threadIdx.x; j < hidden; j += blockDim.x) {
        dst[j] = fmaxf(row[j] + bias[j], 0.0f);
    }
}
"""
# The same with the thread's place and the step through locals, and a bounds check on the row first.
THROUGH_LOCALS = """
__global__ void scale_rows(const float* in, const float* w, float* out, int rows, int cols)
{
    int row = blockIdx.x;
    if (row >= rows) return;
    int tid = threadIdx.x;
    int stride = blockDim.x;
    for (int c = tid; c < cols; c = c + stride)
        out[row * cols + c] = w[c] * in[row * cols + c];
}
"""


@needs_compiler
def test_a_rows_loop_is_shared_by_blocks_and_the_grid_counts_them(tmp_path: Path) -> None:
    target = target_of(FEW_LONG_ROWS, tmp_path)
    candidates = row_blocks.propose(target)
    assert [c.launch.grid for c in candidates if c.launch] == [
        ("tokens * ceil_div(hidden, block.x * 8)",),  # a row's parts neighbours in a 1-D grid
        ("tokens", "ceil_div(hidden, block.x * 32)"),  # its parts along y
        ("tokens", "ceil_div(hidden, block.x * 8)"),
    ]
    in_line, along_y = (body_of(c, "bias_relu") for c in candidates[:2])
    assert "const int parts = (hidden + blockDim.x * 8 - 1) / (blockDim.x * 8);" in in_line
    assert "const float* row = x + (size_t)row_block * hidden;" in in_line  # every blockIdx.x is the row
    header = (
        "for (int j = blockIdx.x % parts * blockDim.x + threadIdx.x; j < hidden; j += blockDim.x * parts)"
    )
    assert header in in_line
    assert (
        "for (int j = blockIdx.y * blockDim.x + threadIdx.x; j < hidden; j += blockDim.x * gridDim.y)"
        in along_y
    )
    for candidate in candidates:
        assert compile_kernel(device_source(candidate.source), "bias_relu").ok
    # through the optimizer's table the file read back runs the new grid, and the 16-byte rewrite
    # applies to the shared loop
    for written, start in zip(
        optimize.PROPOSERS[row_blocks.PROPOSER](target)[:2],
        [
            "(blockIdx.x % parts * blockDim.x + threadIdx.x) * 4",
            "(blockIdx.y * blockDim.x + threadIdx.x) * 4",
        ],
        strict=True,
    ):
        reread = load_targets(target.path, written.source).find("bias_relu")
        assert reread is not None and reread.spec is not None and written.launch is not None
        assert reread.spec.launch.grid == written.launch.grid
        (widened,) = vector_loop.propose(reread)
        assert start in body_of(widened, "bias_relu")
        assert compile_kernel(device_source(widened.source), "bias_relu").ok


@needs_compiler
def test_the_threads_place_and_step_through_locals(tmp_path: Path) -> None:
    target = target_of(THROUGH_LOCALS, tmp_path)
    candidates = row_blocks.propose(target)
    assert len(candidates) == 3, target.spec
    body = body_of(candidates[1], "scale_rows")
    assert "int c = blockIdx.y * blockDim.x + tid; c < cols; c = c + stride * gridDim.y" in body
    body = body_of(candidates[0], "scale_rows")
    assert "int row = row_block;" in body
    assert "int c = blockIdx.x % parts * blockDim.x + tid; c < cols; c = c + stride * parts" in body
    for candidate in candidates:
        assert compile_kernel(device_source(candidate.source), "scale_rows").ok


@pytest.mark.parametrize(
    ("old", "new", "why"),
    [
        (
            "dst[j] = fmaxf(row[j] + bias[j], 0.0f);",
            "atomicAdd(&dst[0], row[j]);",
            "every part would add to one element: a reduction",
        ),
        (
            "        dst[j] = fmaxf(",
            "        dst[j + threadIdx.x - threadIdx.x] = fmaxf(",
            "a thread index read",
        ),
        ("    }\n}", "    }\n    if (threadIdx.x == 0) dst[0] = 0.0f;\n}", "a store after the loop"),
        ("    for (int j", "    __syncthreads();\n    for (int j", "a barrier"),
        ("x + (size_t)blockIdx.x * hidden;", "x + (size_t)blockIdx.x * hidden + gridDim.x;", "gridDim read"),
    ],
)
def test_not_offered_where_parts_of_a_row_would_do_other_work(
    old: str, new: str, why: str, tmp_path: Path
) -> None:
    assert old in FEW_LONG_ROWS
    assert row_blocks.propose(target_of(FEW_LONG_ROWS.replace(old, new), tmp_path)) == [], why


def test_a_block_number_behind_a_macro_keeps_the_parts_along_y(tmp_path: Path) -> None:
    # the 1-D grid renames what reads blockIdx.x; a macro's use of it would be left the flat block number
    source = FEW_LONG_ROWS.replace("__global__", "#define TOKEN blockIdx.x\n__global__", 1).replace(
        "x + (size_t)blockIdx.x * hidden", "x + (size_t)TOKEN * hidden"
    )
    candidates = row_blocks.propose(target_of(source, tmp_path))
    assert [len(c.launch.grid) for c in candidates if c.launch] == [2, 2]


def test_a_rows_sum_is_not_split() -> None:
    source = """
__global__ void row_sums(const float* x, float* sums, int rows, int cols) {
    int row = blockIdx.x;
    if (row >= rows) return;
    float s = 0.0f;
    for (int c = threadIdx.x; c < cols; c += blockDim.x) s += x[row * cols + c];
    atomicAdd(&sums[row], s);
}
"""
    (target,) = load_targets(Path("sums.cu"), source).targets
    assert row_blocks.propose(target) == []


@pytest.mark.gpu
def test_parts_of_a_few_long_rows_verify_and_are_faster_on_the_gpu(tmp_path: Path) -> None:
    from cuda_agent.agent.engine import Engine, EngineSettings

    with Engine(EngineSettings(use_cache=False, input_sets=2)) as engine:
        target = target_of(FEW_LONG_ROWS, tmp_path)
        baseline = engine.baseline(target)
        assert baseline.usable, baseline.error
        results = engine.evaluate(baseline, optimize.PROPOSERS[row_blocks.PROPOSER](target))
        seen = shown(baseline.target, results)
        assert results and all(r.verified and r.status == "faster" for r in results), seen
