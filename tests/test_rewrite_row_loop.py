"""The row-loop rewrite on CPU: a thread an element that takes its flat index apart (`i / D`, `i % D`,
`(idx / OW) % OH`) becomes a thread a row looping over the columns, the row's own loads done once, in any
spelling of the bound and the pieces; warp-per-output then splits the loop across lanes and vector-loop
widens it (the chain compiles). It is not offered where a thread does anything but its element's work or
the pieces are not of one row length. The gpu-marked test verifies the chains and their gain on the H200."""

from __future__ import annotations

from pathlib import Path

import pytest
from cuda_agent.agent import optimize, search
from cuda_agent.agent.candidates import Candidate
from cuda_agent.agent.device_source import device_source
from cuda_agent.agent.proposers.rewrites import row_loop, vector_loop, warp_per_output
from cuda_agent.agent.targets import KernelTarget, load_targets
from cuda_agent.sandbox.compile import compile_kernel

from tests.test_idioms import _target, needs_compiler
from tests.test_rewrite_promote import chained, outside
from tests.test_rewrite_warp_per_output import body_of

ROOT = Path(__file__).resolve().parents[1]

# Token and position embeddings added, one thread an output element: the bound through a local, the
# guard an `if` around the work, the row taken apart again (`bt % T`) and the token looked up.
EMBED = """
/* cuda-agent
[sizes]
B = 8
T = 1024
C = 768
V = 50257
[args]
out    = { role = "output", dtype = "float32", shape = ["B", "T", "C"] }
tokens = { role = "input", dtype = "int32", shape = ["B", "T"], init = { low = 0, high = "V" } }
wte    = { role = "input",  dtype = "float32", shape = ["V", "C"] }
wpe    = { role = "input",  dtype = "float32", shape = ["T", "C"] }
B = { role = "scalar", dtype = "int32", value = "B" }
T = { role = "scalar", dtype = "int32", value = "T" }
C = { role = "scalar", dtype = "int32", value = "C" }
[launch]
block = [512]
grid = ["ceil_div(B * T * C, block.x)"]
[verify]
sizes = [{ B = 2, T = 33, C = 50, V = 101 }]
oracle = { out = "wte[tokens.long()] + wpe[:T].unsqueeze(0)" }
*/
__global__ void embed_add(float* out, const int* tokens, const float* wte, const float* wpe,
                          int B, int T, int C)
{
    int idx = blockIdx.x * blockDim.x + threadIdx.x;
    int N = B * T * C;
    if (idx < N) {
        int bt = idx / C;
        int t = bt % T;
        int c = idx % C;
        int token = tokens[bt];
        out[idx] = wte[token * C + c] + wpe[t * C + c];
    }
}
"""

# A bias added along rows with only the remainder taken (no row name), the width a macro.
BIAS = """
#define WIDTH 1024
/* cuda-agent
[sizes]
rows = 16384
[args]
x    = { role = "input",  dtype = "float32", shape = ["rows", 1024] }
bias = { role = "input",  dtype = "float32", shape = [1024] }
y    = { role = "output", dtype = "float32", shape = ["rows", 1024] }
rows = { role = "scalar", dtype = "int32", value = "rows" }
[launch]
block = [256]
grid = ["ceil_div(rows * 1024, block.x)"]
[verify]
sizes = [{ rows = 37 }]
oracle = { y = "torch.relu(x + bias)" }
*/
__global__ void bias_relu(const float* x, const float* bias, float* y, int rows)
{
    const int i = threadIdx.x + blockDim.x * blockIdx.x;
    if (i >= rows * WIDTH) return;
    float v = x[i] + bias[i % WIDTH];
    y[i] = v > 0.0f ? v : 0.0f;
}
"""


# A bias with a GELU, the element count a parameter of its own and the row length another, `auto` index.
COUNTED = """
/* cuda-agent
[sizes]
batch = 8192
width = 768
[args]
x     = { role = "input",  dtype = "float32", shape = ["batch", "width"] }
bias  = { role = "input",  dtype = "float32", shape = ["width"] }
y     = { role = "output", dtype = "float32", shape = ["batch", "width"] }
width = { role = "scalar", dtype = "int32", value = "width" }
total = { role = "scalar", dtype = "int32", value = "batch * width" }
[launch]
block = [128]
grid = ["ceil_div(batch * width, block.x)"]
[verify]
sizes = [{ batch = 5, width = 77 }]
*/
__global__ void bias_gelu(const float* x, const float* bias, float* y, int width, int total)
{
    int id = blockDim.x * blockIdx.x + threadIdx.x;
    if (id < total) {
        int bias_id = id % width;
        float v = x[id] + bias[bias_id];
        y[id] = 0.5f * v * (1.0f + erff(v * 0.70710678f));
    }
}
"""


def chain(target: KernelTarget) -> tuple[Candidate, list[Candidate], list[Candidate]]:
    """The row loop, the warp splits of it and the vector loads of the first two; all compile cleanly."""
    rows, grouped = row_loop.propose(target)
    warps = chained(target, rows, warp_per_output.PROPOSER)
    vectors = [v for w in warps[:2] for v in chained(target, w, vector_loop.PROPOSER)]
    for candidate in (rows, grouped, *warps, *vectors):
        result = compile_kernel(device_source(candidate.source), target.kernel.name, flags=candidate.flags)
        assert result.ok, [d.message for d in result.diagnostics]
    return rows, warps, vectors


@needs_compiler
def test_an_index_select_becomes_a_row_a_thread_then_a_warp_with_vector_loads() -> None:
    target = outside("index_select_rows")
    rows, warps, vectors = chain(target)
    body = body_of(rows, "index_select_rows")
    # the row's index read once, before the loop over its columns; the flat index put back for out[i]
    assert body.index("long long src = index[row];") < body.index("for (int col = 0; col < D; ++col)")
    assert "int i = row * D + col;" in body and "i / D" not in body and "i % D" not in body
    assert rows.launch is not None and rows.launch.grid == ("ceil_div(n, block.x)",)
    assert "(the row's own src once)" in rows.description
    assert any("one warp per row" in w.description for w in warps)
    assert vectors and "16-byte loads" in vectors[0].description


@needs_compiler
def test_the_bound_through_a_local_an_if_guard_and_a_row_taken_apart_again() -> None:
    rows, warps, vectors = chain(_target(EMBED, "embed_add"))
    body = body_of(rows, "embed_add")
    assert "int bt = blockIdx.x * blockDim.x + threadIdx.x;" in body
    assert "int N = B * T * C;" in body and "if (bt < N / C) {" in body  # the user's bound, still read
    loop = body.index("for (int c = 0; c < C; ++c)")
    assert body.index("int t = bt % T;") < loop and body.index("int token = tokens[bt];") < loop
    assert "out[idx] = wte[token * C + c] + wpe[t * C + c];" in body[loop:]
    assert warps and vectors


@needs_compiler
def test_a_remainder_alone_gets_fresh_names_and_a_macro_width() -> None:
    rows, warps, vectors = chain(_target(BIAS, "bias_relu"))
    body = body_of(rows, "bias_relu")
    assert "const int row = threadIdx.x + blockDim.x * blockIdx.x;" in body
    assert "if (row >= rows) return;" in body and "for (int col = 0; col < WIDTH; ++col)" in body
    assert "const int i = row * WIDTH + col;" in body and "bias[col]" in body
    assert warps and vectors


@needs_compiler
def test_an_inner_axis_taken_apart_by_chained_divisions() -> None:
    rows, warps, _ = chain(outside("maxpool2d"))
    body = body_of(rows, "maxpool2d")
    loop = body.index("for (int ow = 0; ow < OW; ++ow)")
    for hoisted in ("int oh = row % OH;", "int c = (row / OH) % C;", "int n = row / OH / C;"):
        assert body.index(hoisted) < loop, hoisted
    assert body.index("const float* plane = inp + (n * C + c) * H * W;") < loop
    assert body.index("int w0 = ow * POOL_STRIDE - POOL_PAD;") > loop  # reads the column: stays in
    assert rows.launch is not None and rows.launch.grid == ("ceil_div(C * N * OH, block.x)",)
    assert warps


def test_a_divisor_of_several_factors_keeps_its_parentheses() -> None:
    """Bilinear upsampling takes its index apart by `out_w * out_h`, out_h being `2 * H`: the row's
    part of that is `row / (2 * H)`, never `row / 2 * H` (which is (row / 2) * H)."""
    (target,) = load_targets(ROOT / "bench" / "kernels" / "holdout" / "upsample_bilinear.cu").targets
    for candidate in row_loop.propose(target):
        body = body_of(candidate, "upsample_bilinear2x")
        assert "int nc = (row / (2 * H));" in body and "int oh = row % out_h;" in body


@needs_compiler
def test_a_count_of_its_own_is_taken_as_whole_rows_where_the_spec_says_so() -> None:
    target = _target(COUNTED, "bias_gelu")
    rows, warps, vectors = chain(target)
    body = body_of(rows, "bias_gelu")
    assert "if (row < total / width) {" in body  # the remainder's name is the column's
    assert "for (int bias_id = 0; bias_id < width; ++bias_id) {" in body
    assert rows.launch is not None and rows.launch.grid == ("ceil_div((batch * width) // width, block.x)",)
    assert any("total is a whole number of rows of width" in a for a in rows.assumptions)
    assert warps and vectors
    # a verify size where the count is not whole rows: the rows would miss its last elements
    partial = COUNTED.replace('value = "batch * width"', 'value = "batch * width - (batch % 2)"')
    assert row_loop.propose(_target(partial, "bias_gelu")) == []


# A template on the row length and the element type, instantiated by the spec, with a 64-bit index.
TEMPLATED = """
#include <cuda_fp16.h>
/* cuda-agent
instantiate = "scale_rows<256, __half>"
[sizes]
rows = 65536
[args]
x    = { role = "input",  dtype = "float16", shape = ["rows", 256] }
gain = { role = "input",  dtype = "float16", shape = [256] }
y    = { role = "output", dtype = "float16", shape = ["rows", 256] }
rows = { role = "scalar", dtype = "int32", value = "rows" }
[launch]
block = [256]
grid = ["ceil_div(rows * 256, block.x)"]
[verify]
sizes = [{ rows = 33 }]
*/
template <int D, typename T>
__global__ void scale_rows(const T* __restrict__ x, const T* __restrict__ gain, T* __restrict__ y, int rows)
{
    const long long i = (long long)blockIdx.x * blockDim.x + threadIdx.x;
    if (i >= (long long)rows * D) return;
    const int c = i % D;
    y[i] = __hmul(x[i], gain[c]);
}
"""


@needs_compiler
def test_a_template_is_analysed_as_its_spec_instantiates_it() -> None:
    target = _target(TEMPLATED, "scale_rows")
    rows, _ = row_loop.propose(target)
    body = body_of(rows, "scale_rows")
    assert "for (long long c = 0; c < D; ++c) {" in body  # the template's own D, 256 for the analysis
    assert rows.launch is not None and rows.launch.grid == ("ceil_div(rows, block.x)",)
    assert rows.source.count("template <int D, typename T>") == 1
    warps = chained(target, rows, warp_per_output.PROPOSER)
    vectors = chained(target, warps[0], vector_loop.PROPOSER)
    assert vectors and "8 elements a step" in vectors[0].description
    for candidate in (rows, warps[0], vectors[0]):
        result = compile_kernel(device_source(candidate.source), "scale_rows<256, __half>")
        assert result.ok, [d.message for d in result.diagnostics]


@needs_compiler
def test_two_neighbouring_columns_a_thread_share_a_pooling_windows_row() -> None:
    """3x3/2 max pooling: a thread for each 2 neighbouring outputs of a row, the row's own indices taken
    apart once; the grid counts the pairs, an odd row's last thread takes one column."""
    target = outside("maxpool2d")
    _, grouped = row_loop.propose(target)
    body = body_of(grouped, "maxpool2d")
    assert "int row = row_2s / (((OW) + 1) / 2);" in body
    assert "int ow0 = row_2s % (((OW) + 1) / 2) * 2;" in body
    assert "for (int ow = ow0; ow < ow0 + 2 && ow < OW; ++ow) {" in body
    assert grouped.launch is not None
    assert grouped.launch.grid == ("ceil_div(C * N * OH * ceil_div(OW, 2), block.x)",)
    result = compile_kernel(device_source(grouped.source), "maxpool2d")
    assert result.ok, [d.message for d in result.diagnostics]


@pytest.mark.parametrize(
    "change",
    [
        # the bound is not a whole number of rows
        ("if (i >= rows * WIDTH) return;", "if (i >= rows * WIDTH - 3) return;"),
        # pieces of two unrelated lengths
        ("bias[i % WIDTH]", "bias[i % WIDTH] + x[i / 7]"),
        # a return in the work would end the row, not the element
        ("y[i] = v > 0.0f ? v : 0.0f;", "if (v < 0.0f) return; y[i] = v;"),
        # the work reads the thread's identity
        ("y[i] = v", "y[i] = threadIdx.x + v"),
        # a warp-level operation
        ("y[i] = v > 0.0f ? v : 0.0f;", "y[i] = __shfl_down_sync(0xffffffff, v, 1);"),
        # the launch reaches only some of the elements the bound allows
        ('grid = ["ceil_div(rows * 1024, block.x)"]', 'grid = ["ceil_div(rows * 512, block.x)"]'),
        # the index assigned after its declaration
        ("float v = x[i] + bias[i % WIDTH];", "float v = x[i] + bias[i % WIDTH]; i += 0;"),
    ],
)
def test_not_offered_where_the_elements_could_change(change: tuple[str, str]) -> None:
    old, new = change
    assert old in BIAS
    source = BIAS.replace(old, new)
    if "i += 0" in new:
        source = source.replace("const int i", "int i")
    assert row_loop.propose(_target(source, "bias_relu")) == []


def test_the_search_measures_the_row_loop_split_across_lanes_in_the_first_round() -> None:
    target = outside("index_select_rows")
    first = search.interleave(search._first_round(target, optimize.PROPOSERS, []))
    proposers = {c.proposer for c in first}
    chained = "rewrite:row-loop+rewrite:warp-per-output"
    assert chained in proposers and f"{chained}+rewrite:vector-loop" in proposers


@pytest.mark.gpu
def test_row_loops_split_across_lanes_verify_and_beat_the_originals_on_the_gpu() -> None:
    from cuda_agent.agent.engine import Engine, EngineSettings

    from tests.test_rewrite_warp_per_output import shown

    with Engine(EngineSettings(use_cache=False, input_sets=3)) as engine:
        kernels = [(EMBED, "embed_add"), (BIAS, "bias_relu"), (COUNTED, "bias_gelu")]
        for target in (outside("index_select_rows"), *(_target(k, name) for k, name in kernels)):
            baseline = engine.baseline(target)
            assert baseline.usable, baseline.error
            rows, warps, vectors = chain(target)
            results = engine.evaluate(baseline, [rows, *warps[:2], *vectors])
            seen = shown(baseline.target, results)
            assert results and all(r.verified for r in results), seen
            assert max(r.speedup or 0 for r in results) > 1.1, seen
        # two columns a thread: verified at the odd sizes of the spec's check (a row's last pair is one)
        target = outside("maxpool2d")
        baseline = engine.baseline(target)
        results = engine.evaluate(baseline, row_loop.propose(target))
        seen = shown(baseline.target, results)
        assert len(results) == 2 and all(r.verified for r in results), seen
        assert results[1].status == "faster", seen
