"""The stencil idiom on CPU: 1-D convolutions and 2-D point stencils become shared-memory tiles with halos,
plain convolutions also several outputs a thread from a sliding register window.

Every candidate compiles with NVRTC, re-reads with the launch it brings (written into the file's spec)
and resolves at the benchmark and verify sizes; the GPU verifier proves the results next.
"""

from __future__ import annotations

import math
from dataclasses import replace
from pathlib import Path

import pytest
from cuda_agent.agent.candidates import Candidate
from cuda_agent.agent.proposers.idioms import IDIOM_PROPOSERS
from cuda_agent.agent.proposers.idioms.conv1d import OUTPUTS_PER_THREAD
from cuda_agent.agent.rewrite import with_launch
from cuda_agent.agent.spec import complete_sizes, resolve
from cuda_agent.agent.targets import KernelTarget, load_targets

from tests.test_idioms import _check, _target, needs_compiler

ROOT = Path(__file__).resolve().parents[1]
propose = IDIOM_PROPOSERS["idiom:stencil"]


def _applied(target: KernelTarget, candidate: Candidate) -> KernelTarget:
    """The candidate as the optimizer applies it: its launch written into the spec, the file re-read."""
    assert candidate.launch is not None
    source = with_launch(target, candidate.launch, candidate.source)
    again = load_targets(target.path, source)
    assert not again.spec_errors, again.spec_errors
    rewritten = again.find(target.kernel.name)
    assert rewritten is not None and rewritten.spec is not None
    assert rewritten.spec.launch == candidate.launch
    spec = rewritten.spec
    for sizes in [spec.sizes, *(complete_sizes(spec, s) for s in spec.verify_sizes)]:
        resolve(spec, sizes)
    return rewritten


def _one(target: KernelTarget) -> Candidate:
    _check(target, "idiom:stencil")
    (candidate,) = propose(target)
    _applied(target, candidate)
    return candidate


# -- 1-D convolution -----------------------------------------------------------------------------------


def _tile_and_blocked(target: KernelTarget) -> tuple[Candidate, list[Candidate]]:
    """The tile candidate and the register-blocked ones, all compiled, applied and resolved."""
    _check(target, "idiom:stencil")
    tile, *blocked = propose(target)
    assert tile.description.startswith("shared-memory tile with halo")
    assert [c.description.split()[0] for c in blocked] == [str(r) for r in OUTPUTS_PER_THREAD]
    for candidate in [tile, *blocked]:
        _applied(target, candidate)
    return tile, blocked


def _covers(target: KernelTarget, candidate: Candidate, outputs: int, count: str) -> None:
    """At every size the spec runs, the grid's threads own all `count` outputs, `outputs` each."""
    spec = target.spec
    assert spec is not None and candidate.launch is not None
    launched = replace(spec, launch=candidate.launch)
    for sizes in [spec.sizes, *(complete_sizes(spec, s) for s in spec.verify_sizes)]:
        _, plan = resolve(launched, sizes)
        threads = plan.grid[0] * plan.block[0]
        assert threads * outputs >= sizes[count] > (threads - plan.block[0]) * outputs, (sizes, plan)
        assert plan.shared_bytes <= 48 * 1024


@needs_compiler
def test_bench_conv1d_reads_its_window_from_shared_memory() -> None:
    target = load_targets(ROOT / "bench" / "kernels" / "conv1d.cu").find("conv1d")
    assert target is not None
    candidate, _ = _tile_and_blocked(target)
    assert candidate.description == "shared-memory tile with halo for the 31-tap window"
    assert candidate.launch is not None and candidate.launch.block == (256,)
    assert candidate.launch.grid == ("ceil_div(m, block.x)",)
    assert candidate.launch.shared_bytes == "(block.x + (taps) - 1) * 4"
    source = candidate.source
    assert "acc += tile[threadIdx.x + k] * w[k];" in source and "x[i + k]" not in source
    assert "if (first + max(s - (taps - 1), 0) < m) tile[s] = x[first + s];" in source
    assert source.index("__syncthreads();") < source.index("if (i < m)")


@needs_compiler
def test_bench_conv1d_computes_several_outputs_a_thread_from_a_sliding_window() -> None:
    target = load_targets(ROOT / "bench" / "kernels" / "conv1d.cu").find("conv1d")
    assert target is not None
    _, blocked = _tile_and_blocked(target)
    for outputs, candidate in zip(OUTPUTS_PER_THREAD, blocked, strict=True):
        # Thread t reads tile[outputs * t + ...]: distinct banks for the 32 threads of a warp.
        assert math.gcd(outputs, 32) == 1
        assert candidate.description == (
            f"{outputs} outputs a thread from a sliding register window over a shared-memory tile, "
            "for the 31-tap window"
        )
        assert candidate.launch is not None and candidate.launch.block == (256,)
        assert candidate.launch.grid == (f"ceil_div(m, {outputs} * block.x)",)
        assert candidate.launch.shared_bytes == f"({2 * outputs} * block.x + (taps) - 1) * 4"
        _covers(target, candidate, outputs, "m")  # n = 40, taps = 7: 34 outputs, one block
        source, last = candidate.source, outputs - 1
        for line in [
            f"int i = {outputs} * (blockIdx.x * blockDim.x + threadIdx.x);",
            f"const int first = {outputs} * blockIdx.x * blockDim.x;  // the block's first output",
            "if (s < slots && first + max(s - (taps - 1), 0) < m) tile[s] = x[first + s];",
            "if (i < m) {",
            f"for (int r = 0; r < {outputs}; ++r) acc[r] = 0.0f;",
            "for (int k = 0; k < taps; ++k) {",
            f"for (int r = 0; r < {last}; ++r) window[r] = window[r + 1];",
            f"window[{last}] = tile[{outputs} * threadIdx.x + k + {last}];",
            f"for (int r = 0; r < {outputs}; ++r) acc[r] += window[r] * w[k];",
            f"for (int r = 0; r < {outputs}; ++r) sums[{outputs} * threadIdx.x + r] = acc[r];",
            "const int output = first + r * blockDim.x + threadIdx.x;",
            "if (output >= m) break;  // outputs past the end are not written",
            "float acc = sums[r * blockDim.x + threadIdx.x];",
            "y[output] = acc;",
        ]:
            assert line in source, (line, source)
        # Barriers outside the bounds check: every thread of the block reaches both.
        guard, end = source.index("if (i < m) {"), source.index("y[output] = acc;")
        first_barrier, second = source.index("__syncthreads();"), source.rindex("__syncthreads();")
        assert first_barrier < guard < second < end and source.count("__syncthreads();") == 2
        assert source[guard:second].count("{") == source[guard:second].count("}")


CONV_SPEC = """/* cuda-agent
[sizes]
n = "1 << 24"
taps = 31
[args]
{x} = {{ role = "input", dtype = "float32", shape = ["n"] }}
{w} = {{ role = "input", dtype = "float32", shape = ["taps"] }}
{y} = {{ role = "output", dtype = "float32", shape = ["n"] }}
{n} = {{ role = "scalar", dtype = "int32", value = "n" }}
{taps} = {{ role = "scalar", dtype = "int32", value = "taps" }}
[launch]
block = [128]
grid = ["ceil_div(n, block.x)"]
[verify]
sizes = [{{ n = 100_003 }}, {{ n = 5, taps = 7 }}]
*/
"""

CONVOLUTIONS = [
    # "same", zero outside, through a local, the radius computed after the bounds check
    ("in", "filt", "out", "len", "width", """\
__global__ void k(const float* __restrict__ in, const float* __restrict__ filt,
                  float* __restrict__ out, int len, int width) {
  const int idx = threadIdx.x + blockDim.x * blockIdx.x;
  if (idx >= len) return;
  const int half = width / 2;
  float sum = 0.f;
  for (int t = 0; t < width; t++) {
    int j = idx - half + t;
    if (j >= 0 && j < len) sum += filt[t] * in[j];
  }
  out[idx] = sum;
}""", "if (first + max(s - (width - 1), 0) < len && (j >= 0 && j < len)) tile[s] = in[j];"),
    # clamped at the edges, written inline
    ("x", "w", "y", "n", "taps", """\
__global__ void k(const float* x, const float* w, float* y, int n, int taps)
{
    int i = blockIdx.x * blockDim.x + threadIdx.x;
    if (i < n) {
        float acc = 0.0f;
        for (int k = 0; k < taps; ++k)
            acc += w[k] * x[min(max(i + k - taps / 2, 0), n - 1)];
        y[i] = acc;
    }
}""", "tile[s] = x[min(max(first + s - taps / 2, 0), n - 1)];"),
    # a true (flipped) convolution, zero outside through ?:
    ("x", "h", "y", "n", "m", """__global__ void k(const float* x, const float* h, float* y, int n, int m)
{
    int i = blockIdx.x * blockDim.x + threadIdx.x;
    if (i < n) {
        float acc = 0.0f;
        for (int k = 0; k < m; ++k) {
            const int j = i - k;
            acc += h[k] * (j >= 0 ? x[j] : 0.0f);
        }
        y[i] = acc;
    }
}""", "acc += h[k] * (j >= 0 ? tile[threadIdx.x + (m - 1 - k)] : 0.0f);"),
]  # fmt: skip


@needs_compiler
@pytest.mark.parametrize(("x", "w", "y", "n", "taps", "kernel", "expected"), CONVOLUTIONS)
def test_convolutions_with_other_names_and_boundaries(
    x: str, w: str, y: str, n: str, taps: str, kernel: str, expected: str
) -> None:
    target = _target(CONV_SPEC.format(x=x, w=w, y=y, n=n, taps=taps) + kernel, "k")
    candidate = _one(target)  # clamped, conditional or flipped reads: the tile alone
    assert expected in candidate.source, candidate.source
    assert candidate.launch is not None and candidate.launch.shared_bytes == "(block.x + (taps) - 1) * 4"


PLAIN = [
    # an early return, other names, an offset through a local, a loop local, finished with a bias
    ("""/* cuda-agent
[sizes]
n = 100_000
taps = 15
m = "n - taps"
[args]
in = { role = "input", dtype = "float32", shape = ["n"] }
filt = { role = "input", dtype = "float32", shape = ["taps"] }
bias = { role = "input", dtype = "float32", shape = ["m"] }
out = { role = "output", dtype = "float32", shape = ["m"] }
len = { role = "scalar", dtype = "int32", value = "n" }
width = { role = "scalar", dtype = "int32", value = "taps" }
[launch]
block = [128]
grid = ["ceil_div(m, block.x)"]
[verify]
sizes = [{ n = 40, taps = 7 }, { n = 2, taps = 1 }]
*/
__global__ void k(const float* __restrict__ in, const float* __restrict__ filt, const float* bias,
                  float* __restrict__ out, int len, int width) {
  const int idx = threadIdx.x + blockDim.x * blockIdx.x;
  if (idx >= len - width) return;
  const int shift = 1;
  float sum = 0.f;
  for (int t = 0; t < width; t++) {
    const float v = in[idx + t + shift];  // one tap
    sum += filt[t] * v;
  }
  sum += bias[idx];
  out[idx] = sum > 0.f ? sum : 0.f;
}""", "m", [
        "const int idx = {r} * (threadIdx.x + blockDim.x * blockIdx.x);",
        "if (s < slots && first + max(s - (width - 1), 0) < (len - width)) tile[s] = in[first + s + shift];",
        "  if (idx < (len - width)) {",
        "        const float v = window[r];  // one tap",
        "        sum[r] += filt[t] * v;",
        "    float sum = sums[r * blockDim.x + threadIdx.x];",
        "    sum += bias[output];",
        "    out[output] = sum > 0.f ? sum : 0.f;",
    ]),
    # doubles, `acc = acc + ...`, a grid not written as ceil_div(outputs, block.x)
    ("""/* cuda-agent
[sizes]
n = "1 << 20"
taps = 9
m = "n - taps + 1"
[args]
x = { role = "input", dtype = "float64", shape = ["n"] }
w = { role = "input", dtype = "float64", shape = ["taps"] }
y = { role = "output", dtype = "float64", shape = ["m"] }
n = { role = "scalar", dtype = "int32", value = "n" }
taps = { role = "scalar", dtype = "int32", value = "taps" }
scale = { role = "scalar", dtype = "float64", value = 1.5 }
[launch]
block = [256]
grid = ["(m + block.x - 1) // block.x"]
[verify]
sizes = [{ n = 100_003 }, { n = 40, taps = 7 }]
*/
__global__ void k(const double* x, const double* w, double* y, int n, int taps, double scale)
{
    int i = blockIdx.x * blockDim.x + threadIdx.x;
    int m = n - taps + 1;
    if (i >= m) return;
    double acc = 0.0;
    for (int k = 0; k < taps; ++k)
        acc = acc + x[i + k] * w[k];
    y[i] = acc * scale;
}""", "m", [
        "extern __shared__ double tile[];",
        "for (int r = 0; r < {r}; ++r) acc[r] = acc[r] + window[r] * w[k];",
        "double acc = sums[r * blockDim.x + threadIdx.x];",
        "y[output] = acc * scale;",
    ]),
]  # fmt: skip


@needs_compiler
@pytest.mark.parametrize(("kernel", "count", "lines"), PLAIN)
def test_plain_convolutions_also_get_several_outputs_a_thread(
    kernel: str, count: str, lines: list[str]
) -> None:
    target = _target(kernel, "k")
    _, blocked = _tile_and_blocked(target)
    for outputs, candidate in zip(OUTPUTS_PER_THREAD, blocked, strict=True):
        _covers(target, candidate, outputs, count)
        for line in lines:
            assert line.replace("{r}", str(outputs)) in candidate.source, (line, candidate.source)


BENCH_SPEC = (ROOT / "bench" / "kernels" / "conv1d.cu").read_text().split("*/")[0] + "*/\n"


@needs_compiler
@pytest.mark.parametrize(
    ("guard", "end"),
    [
        ("if (i <= n - taps) {", "}"),
        ("if (n - taps >= i) {", "}"),
        ("if (i < n - taps + 1) {", "}"),
        ("if (i > n - taps) return;", ""),
        ("if (n - taps < i) return;", ""),
    ],
)
def test_the_bound_is_recognised_however_it_is_spelled(guard: str, end: str) -> None:
    """`if (i <= n - k)` is `if (i < n - k + 1)`: the convolution was left at 1.04x when spelled so."""
    kernel = (
        "__global__ void conv1d(const float* x, const float* w, float* y, int n, int taps)\n{\n"
        "    int i = blockIdx.x * blockDim.x + threadIdx.x;\n"
        f"    {guard}\n        float acc = 0.0f;\n"
        "        for (int k = 0; k < taps; ++k) acc += x[i + k] * w[k];\n"
        f"        y[i] = acc;\n    {end}\n}}\n"
    )
    tile, blocked = _tile_and_blocked(_target(BENCH_SPEC + kernel, "conv1d"))
    assert "acc += tile[threadIdx.x + k] * w[k];" in tile.source
    assert len(blocked) == len(OUTPUTS_PER_THREAD)


@needs_compiler
def test_the_bench_body_on_one_line_is_blocked_too() -> None:
    body = (
        "if (i < m) { float acc = 0.0f; for (int k = 0; k < taps; ++k) acc += x[i + k] * w[k]; y[i] = acc; }"
    )
    kernel = (
        "__global__ void conv1d(const float* x, const float* w, float* y, int n, int taps)\n{\n"
        f"    int i = blockIdx.x * blockDim.x + threadIdx.x;\n    int m = n - taps + 1;\n    {body}\n}}\n"
    )
    _, blocked = _tile_and_blocked(_target(BENCH_SPEC + kernel, "conv1d"))
    for outputs, candidate in zip(OUTPUTS_PER_THREAD, blocked, strict=True):
        # The generated statements each on a line of their own (a #pragma must start one).
        assert f"for (int r = 0; r < {outputs}; ++r) acc[r] = 0.0f;\n" in candidate.source
        assert f"        float window[{outputs}];" in candidate.source


@needs_compiler
@pytest.mark.parametrize(
    "body",
    [
        # the sum kept in a wider type than the input
        "double acc = 0.0; for (int k = 0; k < taps; ++k) acc += x[i + k] * w[k]; y[i] = (float)acc;",
        # i used in the loop beyond the read: the outputs of one thread would differ there
        "float acc = 0.0f; for (int k = 0; k < taps; ++k) acc += x[i + k] * w[k] * (i & 1); y[i] = acc;",
        # two sums
        """float acc = 0.0f; float norm = 0.0f;
        for (int k = 0; k < taps; ++k) { acc += x[i + k] * w[k]; norm += w[k]; }
        y[i] = acc / norm;""",
        # the finishing code reads a local of the bounds check's block
        "float acc = 0.0f; const float half = 0.5f; for (int k = 0; k < taps; ++k) acc += x[i + k] * w[k]; "
        "y[i] = acc * half;",
        # the finishing code depends on the thread, or jumps
        "float acc = 0.0f; for (int k = 0; k < taps; ++k) acc += x[i + k] * w[k]; y[i] = acc + threadIdx.x;",
        "float acc = 0.0f; for (int k = 0; k < taps; ++k) acc += x[i + k] * w[k]; if (acc < 0) return; "
        "y[i] = acc;",
        # a warp collective in the loop: lanes would exchange other outputs' values
        "float acc = 0.0f; for (int k = 0; k < taps; ++k) "
        "acc += __shfl_xor_sync(0xffffffffu, x[i + k], 1) * w[k]; y[i] = acc;",
        # the sum starts from i
        "float acc = (float)i; for (int k = 0; k < taps; ++k) acc += x[i + k] * w[k]; y[i] = acc;",
        # a read under a condition: the tile loads under it, the sliding window does not
        "float acc = 0.0f; for (int k = 0; k < taps; ++k) if (taps > 1) acc += x[i + k] * w[k]; y[i] = acc;",
        # a clamped read
        "float acc = 0.0f; for (int k = 0; k < taps; ++k) acc += x[min(i + k, n - 1)] * w[k]; y[i] = acc;",
    ],
)
def test_other_convolutions_get_the_tile_alone(body: str) -> None:
    kernel = (
        "__global__ void conv1d(const float* x, const float* w, float* y, int n, int taps)\n{\n"
        "    int i = blockIdx.x * blockDim.x + threadIdx.x;\n    int m = n - taps + 1;\n"
        f"    if (i < m) {{\n        {body}\n    }}\n}}\n"
    )
    target = _target(BENCH_SPEC + kernel, "conv1d")
    _check(target, "idiom:stencil")
    assert [c.description for c in propose(target)] == ["shared-memory tile with halo for the 31-tap window"]


@pytest.mark.parametrize(
    "body",
    [
        # the edge handled with `continue`: the loader could not see which slots are never read
        """    if (i >= n) return;
    float acc = 0.0f;
    for (int k = 0; k < taps; ++k) {
        int j = i + k - taps / 2;
        if (j < 0 || j >= n) continue;
        acc += w[k] * x[j];
    }
    y[i] = acc;""",
        # outputs near the start skipped: their windows would reach before x
        """    if (i >= n) return;
    if (i < taps) return;
    float acc = 0.0f;
    for (int k = 0; k < taps; ++k) acc += w[k] * x[i + k - taps];
    y[i] = acc;""",
        # a row sum, not a window: the input does not move with i + k
        """    if (i >= n) return;
    float acc = 0.0f;
    for (int k = 0; k < taps; ++k) acc += w[k] * x[k];
    y[i] = acc;""",
        # a condition on the running sum decides which inputs are read
        """    if (i >= n) return;
    float acc = 0.0f;
    for (int k = 0; k < taps; ++k) if (acc < 1.0f) acc += w[k] * x[i + k];
    y[i] = acc;""",
    ],
)
def test_windows_the_loader_cannot_reproduce_are_left_alone(body: str) -> None:
    kernel = (
        "__global__ void k(const float* x, const float* w, float* y, int n, int taps)\n{\n"
        "    int i = blockIdx.x * blockDim.x + threadIdx.x;\n" + body + "\n}"
    )
    target = _target(CONV_SPEC.format(x="x", w="w", y="y", n="n", taps="taps") + kernel, "k")
    assert propose(target) == []


# -- 2-D stencils --------------------------------------------------------------------------------------


@needs_compiler
def test_bench_jacobi2d_reads_its_neighbours_from_a_tile() -> None:
    target = load_targets(ROOT / "bench" / "kernels" / "jacobi2d.cu").find("jacobi2d")
    assert target is not None
    candidate = _one(target)
    assert candidate.description == "shared-memory tile with a one-element halo for the 4-point stencil"
    assert candidate.launch is not None and candidate.launch.block == (32, 8)
    assert candidate.launch.grid == ("ceil_div((cols), block.x)", "ceil_div((rows), block.y)")
    assert candidate.launch.shared_bytes == "(block.x + 2) * (block.y + 2) * 4"
    source = candidate.source
    assert "row > 0        ? tile[threadIdx.y * pitch + threadIdx.x + 1] : 0.0f;" in source
    assert "u[(row - 1) * cols + col]" not in source
    assert source.index("__syncthreads();") < source.index("if (row < rows && col < cols)")


GRID_SPEC = """/* cuda-agent
[sizes]
h = 4096
w = 4096
[args]
src = { role = "input", dtype = "float32", shape = ["h", "w"] }
dst = { role = "output", dtype = "float32", shape = ["h", "w"] }
height = { role = "scalar", dtype = "int32", value = "h" }
width = { role = "scalar", dtype = "int32", value = "w" }
[launch]
block = [16, 16]
grid = ["ceil_div(w, block.x)", "ceil_div(h, block.y)"]
[verify]
sizes = [{ h = 33, w = 77 }]
*/
"""


@needs_compiler
def test_nine_point_box_filter_with_interior_guard_and_early_return() -> None:
    kernel = """__global__ void k(const float* src, float* dst, int height, int width) {
  const int x = threadIdx.x + blockIdx.x * blockDim.x;
  const int y = threadIdx.y + blockIdx.y * blockDim.y;
  if (x >= width || y >= height) return;
  float s = src[y * width + x];
  if (y >= 1 && y + 1 < height && x > 0 && x < width - 1) {
    s += src[(y - 1) * width + x - 1] + src[(y - 1) * width + x] + src[(y - 1) * width + x + 1];
    s += src[y * width + x - 1] + src[y * width + x + 1];
    s += src[(y + 1) * width + x - 1] + src[(y + 1) * width + x] + src[(y + 1) * width + x + 1];
    s /= 9.0f;
  }
  dst[y * width + x] = s;
}"""
    candidate = _one(_target(GRID_SPEC + kernel, "k"))
    assert "9-point" in candidate.description and "src[(y" not in candidate.source


@pytest.mark.parametrize(
    "read",
    [
        "src[y * width + x - 1]",  # no guard: at x == 0 this reads the previous row's last element
        "(y > 0 ? src[(y - 1) * width + x + 1] : 0.0f)",  # the column is not guarded
        "(x < width - 2 ? src[y * width + x + 2] : 0.0f)",  # two columns away: beyond the halo
    ],
)
def test_reads_not_kept_inside_the_grid_or_the_halo_are_left_alone(read: str) -> None:
    kernel = f"""__global__ void k(const float* src, float* dst, int height, int width) {{
  int x = blockIdx.x * blockDim.x + threadIdx.x;
  int y = blockIdx.y * blockDim.y + threadIdx.y;
  if (y < height && x < width) dst[y * width + x] = src[y * width + x] - {read};
}}"""
    assert propose(_target(GRID_SPEC + kernel, "k")) == []


# -- not stencils --------------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("path", "name"),
    [
        ("examples/elementwise.cu", None),
        ("examples/transpose.cu", "transpose"),
        ("bench/kernels/matmul_naive.cu", "matmul"),
        ("bench/kernels/row_sum.cu", None),
        ("bench/kernels/softmax_rows.cu", None),
    ],
)
def test_other_kernels_are_not_stencils(path: str, name: str | None) -> None:
    targets = load_targets(ROOT / path).targets
    chosen = [t for t in targets if name is None or t.kernel.name == name]
    assert chosen
    for target in chosen:
        assert propose(target) == []
