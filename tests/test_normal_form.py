"""Kernels spelled otherwise than the rewrites read them get the rewrites through their normal form: a
grid-stride loop written as a `while` is read as its `for` (the vector loop then applies), a barrier as
the kernel's last statement is left out (the element-wise rewrites then apply), and neither is read so
where the index outlives the loop, a `continue` would skip the step, or the barrier orders something. A
grid-stride loop over the outputs is read as a thread an output for the analysis-driven rewrites, each
then launched over a grid that covers them."""

from __future__ import annotations

from pathlib import Path

import pytest
from cuda_agent.agent.candidates import Candidate
from cuda_agent.agent.device_source import device_source
from cuda_agent.agent.optimize import PROPOSERS
from cuda_agent.agent.proposers.normal_form import grid_stride_form, normal_form
from cuda_agent.agent.proposers.rewrites import stride_loop, vector_loop, warp_per_output, y_split
from cuda_agent.agent.proposers.transforms import TRANSFORMS
from cuda_agent.agent.search import _propose
from cuda_agent.agent.targets import KernelTarget, load_targets
from cuda_agent.sandbox.compile import compile_kernel

from tests.test_rewrite_warp_per_output import needs_compiler

# A leaky ReLU over doubles, its grid-stride loop written as a `while`.
LEAKY = """/* cuda-agent
[sizes]
n = "1 << 22"
[args]
n = { role = "scalar", dtype = "int32", value = "n" }
x = { role = "input", dtype = "float64", shape = ["n"] }
y = { role = "output", dtype = "float64", shape = ["n"] }
slope = { role = "scalar", dtype = "float64", value = 0.01 }
[launch]
block = [256]
grid = [1024]
[verify]
oracle = { y = "torch.where(x > 0, x, x * slope)" }
*/
__global__ void leaky_relu(int n, const double *x, double *y, double slope) {
  int i = threadIdx.x + blockIdx.x * blockDim.x;
  // one grid's worth of elements a step
  while (i < n) {
    if (x[i] > 0.0) y[i] = x[i];
    else y[i] = slope * x[i];
    i += blockDim.x * gridDim.x;
  }
}
"""

# An element-wise 2-D kernel that kept the barrier of the shared-memory kernel it was copied from.
SCALED = """/* cuda-agent
[sizes]
cols = 2048
rows = 1024
[args]
dst = { role = "output", dtype = "float32", shape = ["rows", "cols"] }
src = { role = "input", dtype = "float32", shape = ["rows", "cols"] }
cols = { role = "scalar", dtype = "int32", value = "cols" }
rows = { role = "scalar", dtype = "int32", value = "rows" }
[launch]
block = [16, 16]
grid = ["ceil_div(cols, 16)", "ceil_div(rows, 16)"]
[verify]
oracle = { dst = "src * 3 + 1" }
*/
__global__ void scaled(float *dst, float *src, int cols, int rows)
{
    const int c = blockIdx.x * 16 + threadIdx.x;
    const int r = blockIdx.y * 16 + threadIdx.y;
    int at = r * cols + c;
    if (c < cols && r < rows)
        dst[at] = 3.0f * src[at] + 1.0f;
    __syncthreads();
}
"""


# Column means of a row-major matrix, one output a step of a grid-stride loop over the columns, launched
# over a fixed number of blocks the way grid-stride code usually is.
COLUMN_MEANS = """/* cuda-agent
[sizes]
rows = 2048
cols = 8192
[args]
m = { role = "input", dtype = "float32", shape = ["rows", "cols"] }
means = { role = "output", dtype = "float32", shape = ["cols"] }
rows = { role = "scalar", dtype = "int32", value = "rows" }
cols = { role = "scalar", dtype = "int32", value = "cols" }
[launch]
block = [128]
grid = [16]
[verify]
sizes = [{ rows = 37, cols = 1001 }]
oracle = { means = "m.mean(0)" }
reduction = "rows"
*/
__global__ void column_means(const float* m, float* means, int rows, int cols)
{
    for (int col = blockIdx.x * blockDim.x + threadIdx.x; col < cols; col += gridDim.x * blockDim.x) {
        float total = 0.0f;
        for (int row = 0; row < rows; ++row)
            total += m[row * cols + col];
        means[col] = total / rows;
    }
}
"""

# Squared row norms, written as NVIDIA's samples write grid-stride loops, spec inferred.
ROW_NORMS = """__global__ void row_norms(const float* x, float* norms, int rows, int cols)
{
    for (int r = threadIdx.x + blockIdx.x * blockDim.x; r < rows; r += blockDim.x * gridDim.x) {
        float acc = 0.0f;
        for (int c = 0; c < cols; ++c) acc += x[r * cols + c] * x[r * cols + c];
        norms[r] = acc;
    }
}
"""


# A transposition with grid-stride loops along both axes, launched on a fixed 32 x 32 grid of blocks.
TRANSPOSE = """/* cuda-agent
[sizes]
rows = 4096
cols = 2048
[args]
src = { role = "input", dtype = "float32", shape = ["rows", "cols"] }
dst = { role = "output", dtype = "float32", shape = ["cols", "rows"] }
rows = { role = "scalar", dtype = "int32", value = "rows" }
cols = { role = "scalar", dtype = "int32", value = "cols" }
[launch]
block = [32, 8]
grid = [32, 32]
[verify]
sizes = [{ rows = 37, cols = 101 }]
oracle = { dst = "src.t()" }
*/
__global__ void flip(const float* src, float* dst, int rows, int cols)
{
    for (int y = blockIdx.y * blockDim.y + threadIdx.y; y < rows; y += blockDim.y * gridDim.y) {
        for (int x = blockIdx.x * blockDim.x + threadIdx.x; x < cols; x += blockDim.x * gridDim.x) {
            dst[x * rows + y] = src[y * cols + x];
        }
    }
}
"""


def _target(source: str) -> KernelTarget:
    (target,) = load_targets(Path("kernel.cu"), source).targets
    assert target.spec is not None, target.note
    return target


def _compiles(target: KernelTarget, candidate: Candidate) -> None:
    result = compile_kernel(device_source(candidate.source), target.kernel.name, flags=candidate.flags)
    assert result.ok and not result.diagnostics, [d.message for d in result.diagnostics]


@needs_compiler
def test_a_while_grid_stride_loop_is_read_as_its_for_and_vectorised() -> None:
    target = _target(LEAKY)
    assert vector_loop.propose(target) == []  # as written, no rewrite reads the loop
    normal = normal_form(target)
    assert normal is not None and normal.spec == target.spec
    body = normal.source.split("void leaky_relu(")[1]
    assert "for (int i = threadIdx.x + blockIdx.x * blockDim.x; i < n; i += blockDim.x * gridDim.x) {" in body
    assert "while" not in body and body.count("blockDim.x * gridDim.x") == 1
    assert "// one grid's worth of elements a step" in body  # comments stay
    (candidate,) = _propose(vector_loop.PROPOSER, vector_loop.propose, target, [])
    assert "16-byte loads" in candidate.description
    # both branches store y: the step defines all of it, so it is not read first
    assert "const uint4*>(&y[" not in candidate.source and "const uint4*>(&x[" in candidate.source
    _compiles(target, candidate)


@needs_compiler
def test_a_trailing_barrier_is_left_out_for_the_element_wise_rewrites() -> None:
    target = _target(SCALED)
    assert stride_loop.propose(target) == []  # the barrier: no element-wise rewrite as written
    normal = normal_form(target)
    assert normal is not None and "__syncthreads" not in normal.source
    (candidate,) = _propose(stride_loop.PROPOSER, stride_loop.propose, target, [])
    assert "__syncthreads" not in candidate.source
    _compiles(target, candidate)


@pytest.mark.parametrize(
    ("old", "new", "why"),
    [
        ("  }\n}", "  }\n  y[0] = i;\n}", "the index read after the loop"),
        (
            "if (x[i] > 0.0) y[i] = x[i];",
            "if (x[i] > 0.0) { y[i] = x[i]; continue; }",
            "a continue skips the step",
        ),
        ("else y[i] = slope * x[i];", "else y[i] = slope * x[i];\n    i++;", "the index moved twice"),
    ],
)
def test_a_while_loop_is_left_as_written_where_its_for_would_differ(old: str, new: str, why: str) -> None:
    assert old in LEAKY
    assert normal_form(_target(LEAKY.replace(old, new))) is None, why


@needs_compiler
def test_a_grid_stride_loop_over_the_outputs_gets_the_rewrites_of_a_thread_an_output() -> None:
    """As written, no analysis-driven rewrite reads the loop over the outputs; read as a thread an output
    it gets the lane split, and each candidate brings a launch whose grid covers the rows."""
    (target,) = load_targets(Path("row_norms.cu"), ROW_NORMS).targets
    assert target.spec is not None, target.note
    assert warp_per_output.propose(target) == []
    stepped = grid_stride_form(target)
    assert stepped is not None and stepped.spec is not None
    body = stepped.source.split("void row_norms(")[1]
    assert "int r = threadIdx.x + blockIdx.x * blockDim.x;\n    if (r < rows) {" in body
    assert "gridDim" not in body
    assert stepped.spec.launch.grid == ("ceil_div(rows, block.x)",)
    candidates = _propose(warp_per_output.PROPOSER, warp_per_output.propose, target, [])
    assert candidates and all(c.launch is not None for c in candidates)
    warp = candidates[0]
    assert warp.description.startswith("one warp per r") and "__shfl_xor_sync" in warp.source
    assert warp.launch is not None and warp.launch.grid == ("ceil_div(rows, block.x // 32)",)
    _compiles(target, warp)
    # the transforms keep the loop as the user wrote it
    (restricted,) = _propose("restrict", TRANSFORMS["restrict"], target, [])
    assert "r += blockDim.x * gridDim.x" in restricted.source


@pytest.mark.parametrize(
    "head",
    [
        "    for (size_t r = (size_t)blockIdx.x * blockDim.x + threadIdx.x; r < rows;"
        " r += blockDim.x * gridDim.x) {",
        "    const int tid = blockIdx.x * blockDim.x + threadIdx.x;\n"
        "    for (int r = tid; r < rows; r += gridDim.x * blockDim.x) {",
    ],
)
def test_the_loop_may_start_from_a_cast_or_a_local(head: str) -> None:
    original = (
        "    for (int r = threadIdx.x + blockIdx.x * blockDim.x; r < rows; r += blockDim.x * gridDim.x) {"
    )
    assert original in ROW_NORMS
    (target,) = load_targets(Path("row_norms.cu"), ROW_NORMS.replace(original, head)).targets
    stepped = grid_stride_form(target)
    assert stepped is not None
    assert "if (r < rows) {" in stepped.source and "gridDim" not in stepped.source.split("void row_norms(")[1]


@needs_compiler
def test_grid_stride_loops_along_y_and_x_read_as_a_2d_guard() -> None:
    """The y loop holding the x loop alone: one check of both, the grid covering both extents (the
    transposition idiom, which reads grid-stride loops itself, is offered once, on its own launch). With
    work of its own in the y loop, the checks nest."""
    target = _target(TRANSPOSE)
    stepped = grid_stride_form(target)
    assert stepped is not None and stepped.spec is not None
    body = stepped.source.split("void flip(")[1]
    assert (
        "int y = blockIdx.y * blockDim.y + threadIdx.y;\n    int x = blockIdx.x * blockDim.x + threadIdx.x;\n"
        in body
    )
    assert "if (y < rows && x < cols) {" in body and "gridDim" not in body
    assert stepped.spec.launch.grid == ("ceil_div(cols, block.x)", "ceil_div(rows, block.y)")
    (tile,) = _propose("idiom:transpose", PROPOSERS["idiom:transpose"], target, [])
    assert tile.launch is not None and "grid = [32, 32]" not in tile.source
    _compiles(target, tile)
    own_work = TRANSPOSE.replace(
        "        for (int x", "        const int base = y * cols;\n        for (int x"
    ).replace("src[y * cols + x]", "src[base + x]")
    # the x index's name declared again at the top level: the checks nest, each name in its own scope
    taken = TRANSPOSE.replace("    }\n}\n", "    }\n    const int x = 0;\n    dst[x] = dst[x];\n}\n")
    for source in (own_work, taken):
        assert source != TRANSPOSE
        nested = grid_stride_form(_target(source))
        assert nested is not None
        assert "if (y < rows) {" in nested.source and "if (x < cols) {" in nested.source


def test_a_bound_held_in_a_local_is_written_in_the_spec_sizes() -> None:
    """`const int total = batch * heads;` bounding the loop: the grid is written from the sizes it is made
    of; a bound with a division (C's integer one) is not."""
    kernel = """__global__ void head_sums(const float* x, float* out, int batch, int heads, int dim)
{
    const int total = batch * heads;
    for (int r = blockIdx.x * blockDim.x + threadIdx.x; r < total; r += blockDim.x * gridDim.x) {
        float acc = 0.0f;
        for (int d = 0; d < dim; ++d) acc += x[r * dim + d];
        out[r] = acc;
    }
}
"""
    spec = """/* cuda-agent
[sizes]
batch = 64
heads = 16
dim = 1024
[args]
x = { role = "input", dtype = "float32", shape = ["batch", "heads", "dim"] }
out = { role = "output", dtype = "float32", shape = ["batch", "heads"] }
batch = { role = "scalar", dtype = "int32", value = "batch" }
heads = { role = "scalar", dtype = "int32", value = "heads" }
dim = { role = "scalar", dtype = "int32", value = "dim" }
[launch]
block = [256]
grid = [8]
[verify]
oracle = { out = "x.sum(-1)" }
reduction = "dim"
*/
"""
    target = _target(spec + kernel)
    stepped = grid_stride_form(target)
    assert stepped is not None and stepped.spec is not None
    assert stepped.spec.launch.grid == ("ceil_div((batch * heads), block.x)",)
    assert any(
        c.description.startswith("one warp per r")
        for c in _propose(warp_per_output.PROPOSER, PROPOSERS[warp_per_output.PROPOSER], target, [])
    )
    halved = spec + kernel.replace("batch * heads;", "batch * heads / 2;")
    assert grid_stride_form(_target(halved)) is None


def test_the_grid_stride_may_be_a_local_of_its_own() -> None:
    """`int stride = blockDim.x * gridDim.x;` read only by the loop's step goes with the loop."""
    source = ROW_NORMS.replace(
        "{\n    for (int r = threadIdx.x + blockIdx.x * blockDim.x; r < rows; r += blockDim.x * gridDim.x) {",
        "{\n    int stride = blockDim.x * gridDim.x;\n"
        "    for (int r = threadIdx.x + blockIdx.x * blockDim.x; r < rows; r += stride) {",
    )
    assert source != ROW_NORMS
    (target,) = load_targets(Path("row_norms.cu"), source).targets
    stepped = grid_stride_form(target)
    assert stepped is not None
    body = stepped.source.split("void row_norms(")[1]
    assert "stride" not in body and "if (r < rows) {" in body
    # read elsewhere too, or changed: the loop stays as written
    elsewhere = source.replace("norms[r] = acc;", "norms[r] = acc + stride * 0.0f;")
    changed = source.replace("norms[r] = acc;", "norms[r] = acc;\n        stride = 1;")
    for other in (elsewhere, changed):
        (kept,) = load_targets(Path("row_norms.cu"), other).targets
        stepped_other = grid_stride_form(kept)
        assert stepped_other is None or "stride" in stepped_other.source.split("void row_norms(")[1]


@needs_compiler
def test_a_fixed_grid_is_replaced_by_one_covering_the_outputs() -> None:
    """The spec launches 16 blocks, each thread looping; the split of the column walk across y threads
    is written with a grid over all the columns, the sizes' names in it."""
    target = _target(COLUMN_MEANS)
    stepped = grid_stride_form(target)
    assert stepped is not None and stepped.spec is not None
    assert stepped.spec.launch.grid == ("ceil_div(cols, block.x)",)
    # as the search proposes it: the launch written into the file's spec
    candidates = _propose(y_split.PROPOSER, PROPOSERS[y_split.PROPOSER], target, [])
    assert candidates and all(c.launch is not None and "cols" in c.launch.grid[0] for c in candidates)
    for candidate in candidates:
        _compiles(target, candidate)
        assert "grid = [16]" not in candidate.source  # the launch it needs, written in its spec


@pytest.mark.parametrize(
    ("old", "new", "why"),
    [
        ("means[col] = total / rows;", "means[col] = total / rows;\n        col += 1;", "the index moved"),
        ("col += gridDim.x * blockDim.x", "col += 2 * gridDim.x * blockDim.x", "a step of two grids"),
        ("col < cols;", "col < cols + rows * 0 + m[0];", "a bound read from memory"),
        (
            "    }\n}\n",
            "    }\n    for (int col = 0; col < 2; ++col) means[col] += 0.0f;\n}\n",
            "a second loop",
        ),
    ],
)
def test_a_grid_stride_loop_is_left_as_written_where_one_step_would_differ(
    old: str, new: str, why: str
) -> None:
    assert old in COLUMN_MEANS, why
    assert grid_stride_form(_target(COLUMN_MEANS.replace(old, new))) is None, why


def test_the_loops_own_continue_or_break_returns_where_the_loop_ends_the_kernel() -> None:
    """One iteration a thread: leaving it early is leaving the kernel, when nothing follows the loop; a
    switch's `break` is not the loop's own."""
    early = COLUMN_MEANS.replace(
        "        float total = 0.0f;\n", "        if (col % 7 == 3) continue;\n        float total = 0.0f;\n"
    ).replace("means[col] = total / rows;", "means[col] = total / rows;\n        if (total < 0) break;")
    stepped = grid_stride_form(_target(early))
    assert stepped is not None
    body = stepped.source.split("void column_means(")[1]
    assert "if (col % 7 == 3) return;" in body and "if (total < 0) return;" in body
    assert "continue" not in body and "break" not in body
    switched = COLUMN_MEANS.replace(
        "means[col] = total / rows;",
        "switch (rows) { case 0: break; default: means[col] = total / rows; }",
    )
    stepped = grid_stride_form(_target(switched))
    assert stepped is not None and "case 0: break;" in stepped.source  # the switch's own
    # work after the loop: a return would skip it, so the loop stays as written
    after = early.replace("    }\n}\n", "    }\n    if (threadIdx.x == 0) means[0] = means[0];\n}\n")
    assert after != early and grid_stride_form(_target(after)) is None


def test_a_barrier_with_work_after_it_stays() -> None:
    source = SCALED.replace("    __syncthreads();\n}", "    __syncthreads();\n    dst[0] = src[1];\n}")
    assert normal_form(_target(source)) is None


@pytest.mark.gpu
def test_rewrites_made_on_the_normal_form_verify_on_the_gpu() -> None:
    """The leaky ReLU's vector loop (its `while` read as a `for`, its output not loaded), the stride loop
    of the kernel that ended with a barrier, and the rewrites of two grid-stride loops over the outputs
    (the column means launched on 16 blocks as written), verified against the kernels as written."""
    from cuda_agent.agent.engine import Engine, EngineSettings

    from tests.test_rewrite_warp_per_output import shown

    with Engine(EngineSettings(use_cache=False, input_sets=2)) as engine:
        for target, proposer in ((_target(LEAKY), vector_loop), (_target(SCALED), stride_loop)):
            baseline = engine.baseline(target)
            assert baseline.usable, baseline.error
            results = engine.evaluate(baseline, _propose(proposer.PROPOSER, proposer.propose, target, []))
            seen = shown(baseline.target, results)
            print(seen)
            assert results and all(r.verified for r in results), seen
        # grid-stride loops over the outputs read as a thread an output, each rewrite on its own grid
        (norms,) = load_targets(Path("row_norms.cu"), ROW_NORMS).targets
        for target, name in ((norms, warp_per_output.PROPOSER), (_target(COLUMN_MEANS), y_split.PROPOSER)):
            baseline = engine.baseline(target)
            assert baseline.usable, baseline.error
            results = engine.evaluate(baseline, _propose(name, PROPOSERS[name], target, []))
            seen = shown(baseline.target, results)
            print(seen)
            assert results and all(r.verified for r in results), seen
