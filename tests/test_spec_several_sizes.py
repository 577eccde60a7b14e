"""Specs inferred for 1-D kernels with three or more integer sizes (the batch/channels/plane kernels of
training frameworks): each buffer as long as the accesses reach, the sizes fitted to the work, verified at
small distinct sizes; and refusals, with the reason, where the reach cannot be known."""

from __future__ import annotations

from pathlib import Path

import pytest
from cuda_agent.agent.kernels import find_kernels
from cuda_agent.agent.spec import KernelSpec, resolve
from cuda_agent.agent.spec.expressions import evaluate
from cuda_agent.agent.spec.infer import infer_spec
from cuda_agent.agent.spec.several_sizes import BENCH_CAPS, VERIFY_CAPS
from cuda_agent.agent.targets import load_targets

ROOT = Path(__file__).resolve().parents[1]

# A flat index over (batch, channels, plane), the channel read out of it: a per-channel scale.
SCALE_CHANNELS = """
__global__ void scale_channels(int total, float *x, const float *gamma, int batch, int channels, int plane)
{
    int i = (blockIdx.x + blockIdx.y * gridDim.x) * blockDim.x + threadIdx.x;
    if (i >= total) return;
    int c = (i / plane) % channels;
    x[i] *= gamma[c];
}
"""
# A thread per channel summing its batch and plane: the buffer it reads is batch * channels * plane long.
CHANNEL_SUMS = """
__global__ void channel_sums(const float *in, float *sums, int batch, int channels, int plane)
{
    int c = blockIdx.x * blockDim.x + threadIdx.x;
    if (c >= channels) return;
    float acc = 0;
    for (int b = 0; b < batch; ++b)
        for (int p = 0; p < plane; ++p)
            acc += in[(b * channels + c) * plane + p];
    sums[c] = acc;
}
"""
# The index taken apart in place (`index /= plane;`), bounded by a product of the sizes.
CHANNEL_BIAS = """
__global__ void add_channel_bias(float *out, const float *bias, int batch, int channels, int plane)
{
    int index = blockIdx.x * blockDim.x + threadIdx.x;
    if (index >= batch * channels * plane) return;
    int p = index % plane;
    index /= plane;
    int c = index % channels;
    index /= channels;
    int b = index;
    out[(b * channels + c) * plane + p] += bias[c];
}
"""
# A window of k taps along rows of `width`: `width - k + 1` outputs a row, which must stay positive.
ROW_WINDOW = """
__global__ void row_window(const float *in, const float *taps, float *out, int n, int width, int k)
{
    int i = blockIdx.x * blockDim.x + threadIdx.x;
    if (i < n) {
        int row = i / (width - k + 1);
        int col = i % (width - k + 1);
        float acc = 0.0f;
        for (int j = 0; j < k; j++) acc += in[row * width + col + j] * taps[j];
        out[i] = acc;
    }
}
"""


# A 7-point Laplacian over a volume, a thread per interior point (z, y, x): lower bounds in the guard.
LAPLACE_3D = """
__global__ void laplace3d(const float *__restrict__ u, float *__restrict__ out, int nx, int ny, int nz)
{
    int i = blockIdx.x * blockDim.x + threadIdx.x;
    int j = blockIdx.y * blockDim.y + threadIdx.y;
    int k = blockIdx.z * blockDim.z + threadIdx.z;
    if (i > 0 && j > 0 && k > 0 && i < nx - 1 && j < ny - 1 && k < nz - 1) {
        int id = (k * ny + j) * nx + i;
        out[id] = u[id - 1] + u[id + 1] + u[id - nx] + u[id + nx] + u[id - nx * ny] + u[id + nx * ny]
                  - 6.f * u[id];
    }
}
"""


def inferred(source: str) -> KernelSpec:
    (kernel,) = find_kernels(source)
    spec, note = infer_spec(kernel, source)
    assert spec is not None, note
    assert any(
        note.startswith(f"spec inferred from the {rank}-D over several sizes pattern") for rank in (1, 2, 3)
    ), note
    return spec


def refusal(source: str) -> str:
    (kernel,) = find_kernels(source)
    spec, note = infer_spec(kernel, source)
    assert spec is None, spec
    return note


def shapes(spec: KernelSpec) -> dict[str, tuple[str, ...]]:
    return {a.name: a.shape for a in spec.arguments if a.role != "scalar"}


def elements(spec: KernelSpec, sizes: dict[str, int]) -> dict[str, int]:
    problem, _ = resolve(spec, sizes)
    return {a.name: a.shape[0] for a in problem.arguments if a.role != "scalar"}


def test_a_piece_of_the_flat_index_sizes_the_buffer_it_reads() -> None:
    spec = inferred(SCALE_CHANNELS)
    assert shapes(spec) == {"x": ("total",), "gamma": ("channels",)}
    assert spec.launch.grid == ("ceil_div(total, block.x)",) and spec.sizes["total"] == 1 << 24
    (verify,) = spec.verify_sizes
    # verified at small sizes, each its own value: a rewrite that mixes up two sizes does not pass
    others = [verify[n] for n in ("batch", "channels", "plane")]
    assert len(set(others)) == 3 and max(others) < 100 and verify["total"] > 10 * 256


def test_a_thread_per_channel_reads_the_product_of_the_sizes_and_stays_under_the_caps() -> None:
    spec = inferred(CHANNEL_SUMS)
    assert shapes(spec) == {"in": ("batch*channels*plane",), "sums": ("channels",)}
    assert spec.launch.grid == ("ceil_div(channels, block.x)",)
    for sizes, caps in ((spec.sizes, BENCH_CAPS), (spec.verify_sizes[0], VERIFY_CAPS)):
        sizes = spec.sizes | sizes
        assert elements(spec, sizes)["in"] <= caps.elements
        assert sizes["channels"] * sizes["batch"] * sizes["plane"] <= caps.work
        assert sizes["batch"] * sizes["plane"] <= caps.thread_work  # one thread's loops stay short
    assert spec.sizes["channels"] >= 256  # enough threads to be worth timing
    assert spec.reduction == "batch * plane"  # the sum's length scales its tolerance


def test_a_sum_kept_in_the_output_element_scales_the_tolerance_like_a_local_one() -> None:
    """darknet sums straight into `mean[i]`; a rewrite that splits that sum over lanes rounds it otherwise
    (a 16,384-term sum moved by 8e-4 on the H100), so the sum's length must scale the tolerance."""
    in_memory = CHANNEL_SUMS.replace("float acc = 0;", "sums[c] = 0;").replace("acc +=", "sums[c] +=")
    spec = inferred(in_memory.replace("    sums[c] = acc;\n", ""))
    assert spec.reduction == "batch * plane"
    # an element the loop moves is no sum: each iteration adds to its own element
    spread = """
__global__ void spread(float *out, const float *x, int n, int m, int q)
{
    int i = blockIdx.x * blockDim.x + threadIdx.x;
    if (i >= n) return;
    for (int k = 0; k < m; ++k) out[i * m + k] += x[i] * q;
}
"""
    assert inferred(spread).reduction is None


def test_a_volume_gets_a_3d_launch_and_its_neighbours_stay_inside_the_buffer() -> None:
    """A thread per interior point of an nx x ny x nz volume: the guard's lower bounds (`k > 0`) keep the
    reads a plane back (`u[id - nx * ny]`) inside the buffer; a block 8 deep along z."""
    spec = inferred(LAPLACE_3D)
    assert spec.launch.block == (32, 4, 2) and len(spec.launch.grid) == 3
    assert spec.launch.grid[2] == "ceil_div(nz - 1, block.z)"
    for sizes in (spec.sizes, spec.sizes | spec.verify_sizes[0]):
        assert elements(spec, sizes)["u"] <= sizes["nx"] * sizes["ny"] * sizes["nz"]
        assert min(sizes[n] for n in ("nx", "ny", "nz")) >= 3  # an interior at all
    # without the lower bound a read reaches before the buffer's start: refused with the reason
    assert "before its start" in refusal(LAPLACE_3D.replace("k > 0 && ", ""))


def test_an_early_returns_lower_bound_keeps_a_read_one_back_inside_the_buffer() -> None:
    """`if (i < 1 || i >= n - 1) return;` says what `i > 0 && i < n - 1` says of the body."""
    smooth = """
__global__ void smooth(const float *u, float *out, int n, int width, int rounds)
{
    int i = blockIdx.x * blockDim.x + threadIdx.x;
    if (i < 1 || i >= n - 1) return;
    out[i] = (u[i - 1] + u[i] + u[i + 1]) * (1.0f / 3) + width * rounds * 0.0f;
}
"""
    spec = inferred(smooth)
    assert shapes(spec) == {"u": ("n",), "out": ("n - 1",)}
    assert "before its start" in refusal(smooth.replace("i < 1 || ", ""))


# A thread per row of n, the rows `offset` apart (darknet's softmax layer, its helper written out).
ROWS_OFFSET_APART = """
__global__ void scale_rows(int n, int offset, int batch, const float *input, float *output)
{
    int b = (blockIdx.x + blockIdx.y * gridDim.x) * blockDim.x + threadIdx.x;
    if (b >= batch) return;
    const float *in = input + b * offset;
    float *out = output + b * offset;
    for (int i = 0; i < n; ++i) out[i] = 2.0f * in[i];
}
"""


def test_a_size_that_spaces_the_threads_rows_is_a_pitch_at_least_a_row_long() -> None:
    """Named like an offset, but it scales the index in a store: at 0 every thread would write row 0, and
    below n two threads' rows would overlap. It is fitted as a pitch of at least n, verify sizes too."""
    spec = inferred(ROWS_OFFSET_APART)
    for sizes in (spec.sizes, spec.sizes | spec.verify_sizes[0]):
        assert sizes["offset"] >= sizes["n"] >= 1, sizes
    assert spec.verify_sizes[0]["offset"] != spec.verify_sizes[0]["n"]  # a rewrite mixing them up fails


# darknet's way: the kernel hands each thread's row to a `__device__` helper that loops over it.
ROWS_THROUGH_A_HELPER = """
__device__ float row_max(const float *x, int n)
{
    float m = x[0];
    for (int i = 1; i < n; ++i) m = fmaxf(m, x[i]);
    return m;
}

__device__ void shifted_exp(int n, const float *x, float shift, float *y)
{
    for (int i = 0; i < n; ++i) y[i] = expf(x[i] - shift);
}

__global__ void rows_exp(int n, int offset, int batch, const float *input, float *output)
{
    int b = (blockIdx.x + blockIdx.y * gridDim.x) * blockDim.x + threadIdx.x;
    if (b >= batch) return;
    float top = row_max(input + b * offset, n);
    shifted_exp(n, input + b * offset, top, output + b * offset);
}
"""


def test_a_kernel_handing_its_rows_to_helpers_is_read_with_the_helpers_written_out() -> None:
    (kernel,) = [k for k in find_kernels(ROWS_THROUGH_A_HELPER) if k.name == "rows_exp"]
    spec, note = infer_spec(kernel, ROWS_THROUGH_A_HELPER)
    assert spec is not None, note
    assert note.endswith("read with its helper calls written out")
    for sizes in (spec.sizes, spec.sizes | spec.verify_sizes[0]):
        assert sizes["offset"] >= sizes["n"] >= 1, sizes  # rows apart: no two threads write one element
    # the original source is untouched: the written-out text is the analysis' alone
    assert "shifted_exp(n, input + b * offset" in ROWS_THROUGH_A_HELPER


def test_an_edit_to_a_helper_alone_is_seen_by_the_kernels_spec(tmp_path: Path) -> None:
    """Specs are kept per kernel text; the helpers a refused kernel is read through are part of what
    they are kept by, so editing a helper (here: its definition removed) is not answered from before."""
    path = tmp_path / "rows.cu"
    first = load_targets(path, ROWS_THROUGH_A_HELPER).find("rows_exp")
    assert first is not None and first.spec is not None
    declared_only = ROWS_THROUGH_A_HELPER.replace(
        "{\n    for (int i = 0; i < n; ++i) y[i] = expf(x[i] - shift);\n}", ";"
    )
    assert declared_only != ROWS_THROUGH_A_HELPER
    second = load_targets(path, declared_only).find("rows_exp")
    assert second is not None and second.spec is None and "handed to a function" in second.note


def test_threads_whose_loops_store_to_one_element_are_refused() -> None:
    """Every thread adds its row into the same n sums from the loop's first iteration on: the original
    races at any sizes, so no spec is offered for it to be measured with."""
    racing = ROWS_OFFSET_APART.replace("out[i] = 2.0f * in[i];", "output[i] += in[i];")
    assert "two threads store to one element" in refusal(racing)


def test_an_index_taken_apart_in_place_is_followed_statement_by_statement() -> None:
    spec = inferred(CHANNEL_BIAS)
    assert shapes(spec) == {"out": ("batch*channels*plane",), "bias": ("channels",)}
    assert spec.launch.grid == ("ceil_div(batch*channels*plane, block.x)",)
    roles = {a.name: a.role for a in spec.arguments}
    assert roles["out"] == "inout" and roles["bias"] == "input"


def test_divisors_stay_positive_and_a_window_is_a_window() -> None:
    spec = inferred(ROW_WINDOW)
    for sizes in (spec.sizes, spec.sizes | spec.verify_sizes[0]):
        assert sizes["k"] == 3
        assert sizes["width"] - sizes["k"] + 1 >= 1
        reached = elements(spec, sizes)
        rows = (sizes["n"] - 1) // (sizes["width"] - sizes["k"] + 1) + 1
        assert reached["in"] >= rows * sizes["width"]  # the last row's last tap is inside
        assert reached["taps"] == sizes["k"]


@pytest.mark.parametrize(
    ("change", "why"),
    [
        (("x[i] *= gamma[c];", "scale_row(x + i, gamma, c);"), "handed to a function"),
        (("x[i] *= gamma[c];", "x[i] *= gamma[(int)x[i]];"), "read from memory"),
        (("x[i] *= gamma[c];", "x[i] *= x[i - plane];"), "before its start"),
        (("if (i >= total) return;", ""), "no bound on the global index"),
    ],
)
def test_a_reach_that_cannot_be_known_is_refused_with_the_reason(change: tuple[str, str], why: str) -> None:
    source = SCALE_CHANNELS.replace(*change)
    if "scale_row" in source:  # declared here, defined in another file: not seen, so not written out
        source = "__device__ void scale_row(float *r, const float *g, int c);\n" + source
    note = refusal(source)
    assert why in note and "6 integer sizes" not in note, note


def test_the_shapes_hold_at_any_sizes_not_only_the_chosen_ones() -> None:
    spec = inferred(CHANNEL_BIAS)
    shape = shapes(spec)["out"][0]
    for batch, channels, plane in ((1, 1, 1), (3, 64, 49), (32, 3, 1000)):
        values = {"batch": batch, "channels": channels, "plane": plane}
        assert evaluate(shape, values) == batch * channels * plane


def test_a_file_of_such_kernels_gets_a_spec_for_each(tmp_path: Path) -> None:
    path = tmp_path / "layers.cu"
    path.write_text(SCALE_CHANNELS + CHANNEL_SUMS + CHANNEL_BIAS)
    targets = load_targets(path).targets
    assert [t.kernel.name for t in targets if t.spec is not None] == [
        "scale_channels",
        "channel_sums",
        "add_channel_bias",
    ]


def test_two_sizes_not_named_as_rows_and_columns_are_sized_the_same_way() -> None:
    spec = inferred("""
        __global__ void scale_rows(const float* x, const float* scale, float* y, int total, int channels) {
            int i = blockIdx.x * blockDim.x + threadIdx.x;
            if (i < total) y[i] = x[i] * scale[i % channels];
        }""")
    assert shapes(spec) == {"x": ("total",), "scale": ("channels",), "y": ("total",)}


TRANSPOSE_ANY_NAMES = """
__global__ void transpose_naive(float *dst, const float *src, int dimA, int dimB)
{
    int x = blockIdx.x * blockDim.x + threadIdx.x;
    int y = blockIdx.y * blockDim.y + threadIdx.y;
    if (x < dimB && y < dimA) dst[x * dimA + y] = src[y * dimB + x];
}
"""


def test_a_2d_kernel_over_two_sizes_of_any_name_gets_a_thread_per_element() -> None:
    # Both sizes scale an index (a transpose), so neither is a row's length alone: sized by its reach.
    spec = inferred(TRANSPOSE_ANY_NAMES)
    assert spec.launch.grid == ("ceil_div(dimB, block.x)", "ceil_div(dimA, block.y)")
    assert shapes(spec) == {"dst": ("dimA*dimB",), "src": ("dimA*dimB",)}
    verify = spec.verify_sizes[0]
    assert verify["dimA"] != verify["dimB"]  # a rewrite that swaps the two sizes does not pass


# The guarded index is the global one shifted by a size: the threads are the bound less the shift.
SHIFTED_INDEX = """
__global__ void shifted_add(const float* a, const float* b, float* c, const int n, int offset)
{
    unsigned int i = blockIdx.x * blockDim.x + threadIdx.x;
    unsigned int k = i + offset;
    if (k < n) c[i] = a[k] + b[k];
}
"""


def test_an_index_shifted_by_a_size_is_bounded_by_the_size_less_the_shift() -> None:
    spec = inferred(SHIFTED_INDEX)
    assert spec.launch.grid == ("ceil_div(n - offset, block.x)",)
    assert shapes(spec) == {"a": ("n",), "b": ("n",), "c": ("n - offset",)}
    assert spec.sizes["n"] >= 1 << 20  # the shift does not take a share of the benchmark's threads
    assert spec.verify_sizes[0]["offset"] > 0  # verified off the aligned start


def test_a_2d_kernel_over_two_sizes_and_a_value_is_sized_by_its_reach() -> None:
    # a course's image kernel: (w, h) bound the threads, `delta` only changes the pixels (no contraction)
    spec = inferred("""
        __global__ void brighten(unsigned char* img, int w, int h, int delta) {
            int x = blockIdx.x * blockDim.x + threadIdx.x;
            int y = blockIdx.y * blockDim.y + threadIdx.y;
            if (x < w && y < h) {
                int v = img[y * w + x] + delta;
                img[y * w + x] = v > 255 ? 255 : (v < 0 ? 0 : v);
            }
        }""")
    assert spec.launch.grid == ("ceil_div(w, block.x)", "ceil_div(h, block.y)")
    assert shapes(spec) == {"img": ("h*w",)}


# A 2-D kernel over rows a pitch apart, read from a shifted start: no two threads may store to one element.
SHIFTED_ROWS = """
__global__ void shifted_rows(const float* a, int pitch_a, float* out, int pitch_out, int width, int height,
                             int shift)
{
    int x = blockIdx.x * blockDim.x + threadIdx.x;
    int y = blockIdx.y * blockDim.y + threadIdx.y;
    if (x < width && y < height) out[y * pitch_out + x] = a[y * pitch_a + x + shift];
}
"""


def test_a_2d_kernel_over_several_sizes_keeps_each_row_inside_its_pitch() -> None:
    spec = inferred(SHIFTED_ROWS)
    assert spec.launch.grid == ("ceil_div(width, block.x)", "ceil_div(height, block.y)")
    assert shapes(spec)["out"] == ("height*pitch_out - pitch_out + width",)
    for sizes in (spec.sizes, spec.sizes | spec.verify_sizes[0]):
        # a pitch shorter than a row would have two threads store to one element: an original that races
        assert sizes["pitch_out"] >= sizes["width"]
        reached = elements(spec, sizes)
        assert reached["a"] == (sizes["height"] - 1) * sizes["pitch_a"] + sizes["width"] + sizes["shift"]


def test_a_buffer_pointer_moved_in_the_body_is_refused() -> None:
    source = CHANNEL_SUMS.replace("    float acc = 0;", "    in += c;\n    float acc = 0;")
    assert "in moved in the body" in refusal(source)


def test_a_pytorch_extensions_kernel_gets_a_spec_it_compiles_with() -> None:
    """Launched inside AT_DISPATCH_FLOATING_TYPES as `k<scalar_t>`: scalar_t is the macro's, not a type
    the file declares, so the instantiation stays the spec's own (float); the launch's block is kept."""
    target = load_targets(ROOT / "tests" / "programs" / "torch_ext.cu").find("fused_bias_leaky_relu_kernel")
    assert target is not None and target.spec is not None, target and target.note
    spec = target.spec
    assert spec.instantiate == "fused_bias_leaky_relu_kernel<float>"
    assert shapes(spec) == {"x": ("numel",), "bias": ("channels",), "y": ("numel",)}
    assert spec.launch.block == (1024,)


@pytest.mark.gpu
def test_the_originals_run_inside_their_buffers_and_rewrites_verify_on_the_gpu(tmp_path: Path) -> None:
    """The inferred sizes are what the original is run and verified at: it must run inside the buffers
    (every guard filled once shows an out-of-bounds write), agree with itself, and give rewrites a check."""
    from cuda_agent.agent.engine import Engine, EngineSettings
    from cuda_agent.agent.optimize import PROPOSERS
    from cuda_agent.agent.search import _first_round, interleave

    from tests.test_rewrite_warp_per_output import shown

    proposers = {name: p for name, p in PROPOSERS.items() if name != "llm"}
    path = tmp_path / "layers.cu"
    path.write_text(
        SCALE_CHANNELS
        + CHANNEL_SUMS
        + CHANNEL_BIAS
        + ROW_WINDOW
        + SHIFTED_ROWS
        + LAPLACE_3D
        + ROWS_OFFSET_APART
        + ROWS_THROUGH_A_HELPER
        + TRANSPOSE_ANY_NAMES
        + SHIFTED_INDEX
    )
    with Engine(EngineSettings(use_cache=False, input_sets=2)) as engine:
        for target in load_targets(path).targets:
            baseline = engine.baseline(target)
            assert baseline.usable, (target.kernel.name, baseline.error)
            results = engine.evaluate(baseline, interleave(_first_round(target, proposers, []))[:6])
            seen = shown(baseline.target, results)
            assert results and all(r.verified for r in results), seen


def test_a_batch_row_a_block_summing_a_third_size() -> None:
    """`n = blockIdx.y` (no threadIdx.y), c along x, a loop over positions: a thread per (n, c) summing L;
    the y blocks are one thread high and the grid's y counts the batch (it was refused: no global y index)."""
    source = """
        __global__ void channel_means(const float* x, float* means, int N, int C, int L) {
            const int n = blockIdx.y;
            const int c = threadIdx.x + blockIdx.x * blockDim.x;
            if (n >= N || c >= C) return;
            float sum = 0.f;
            for (int i = 0; i < L; ++i) sum += x[(n * C + c) * L + i];
            means[n * C + c] = sum / L;
        }"""
    (kernel,) = find_kernels(source)
    spec, note = infer_spec(kernel, source)
    assert spec is not None, note
    assert spec.launch.block == (256, 1) and spec.launch.grid == ("ceil_div(C, block.x)", "N")
    assert spec.reduction == "L"
    for sizes in (spec.sizes, spec.sizes | spec.verify_sizes[0]):
        elements = evaluate(spec.argument("x").shape[0], sizes)
        assert elements == sizes["N"] * sizes["C"] * sizes["L"]
