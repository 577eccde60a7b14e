"""Spec inference from a kernel's signature and body: the common shapes, and refusals with a reason."""

from __future__ import annotations

from dataclasses import replace
from pathlib import Path

import pytest
from cuda_agent.agent.kernels import find_kernels
from cuda_agent.agent.spec import InitSpec, KernelSpec, parse_specs, render_spec, resolve
from cuda_agent.agent.spec.infer import infer_spec
from cuda_agent.sandbox.plan import LaunchPlan

ROOT = Path(__file__).resolve().parents[1]


def infer(source: str) -> tuple[KernelSpec | None, str]:
    (kernel,) = find_kernels(source)
    return infer_spec(kernel, source)


def inferred(source: str) -> KernelSpec:
    spec, note = infer(source)
    assert spec is not None, note
    assert spec.inferred and spec.inference_note == note
    return spec


def roles(spec: KernelSpec) -> dict[str, tuple[str, tuple[str, ...]]]:
    return {a.name: (a.role, a.shape) for a in spec.arguments}


def test_one_dimensional_element_wise():
    spec = inferred("""
        __global__ void add(const float* __restrict__ a, const float* b, float* out, int n) {
            int i = blockIdx.x * blockDim.x + threadIdx.x;
            if (i < n) out[i] = a[i] + b[i];
        }""")
    assert roles(spec) == {
        "a": ("input", ("n",)),
        "b": ("input", ("n",)),
        "out": ("output", ("n",)),
        "n": ("scalar", ()),
    }
    assert spec.arguments[3].value == "n" and spec.arguments[3].dtype == "int32"
    assert spec.sizes == {"n": 16_777_216} and spec.verify_sizes == ({"n": 1_000_003},)
    assert (spec.launch.block, spec.launch.grid) == ((256,), ("ceil_div(n, block.x)",))
    assert spec.inference_note.startswith("spec inferred from the 1-D element-wise pattern")
    problem, launch = resolve(spec, spec.verify_sizes[0])
    assert problem.arguments[0].shape == (1_000_003,) and problem.arguments[3].distribution.value == 1_000_003
    assert launch == LaunchPlan(grid=(3907, 1, 1), block=(256, 1, 1))


def test_in_place_update_is_inout_and_float_scalars_are_drawn_positive():
    spec = inferred("""
        __global__ void saxpy(int n, float a, const float* x, float* y) {
            for (int i = blockIdx.x * blockDim.x + threadIdx.x; i < n; i += blockDim.x * gridDim.x)
                y[i] += a * x[i];
        }""")
    assert roles(spec)["y"] == ("inout", ("n",))
    a = spec.arguments[1]
    assert (a.role, a.dtype, a.init) == ("scalar", "float32", InitSpec("uniform", low=0.5, high=2.0))


@pytest.mark.parametrize(
    ("statement", "role"),
    [
        ("y[i] = 2.0f * x[i];", "output"),
        ("y[i] = y[i] * x[i];", "inout"),
        ("y[i]++;", "inout"),
        ("*(y + i) = x[i];", "output"),
        ("float* out = y + i; *out += x[i];", "inout"),
        ("atomicAdd(&y[i], x[i]);", "inout"),
        ("float v = y[i]; x2[i] = v;", "input"),
    ],
)
def test_roles_from_how_the_body_uses_each_pointer(statement: str, role: str):
    spec = inferred(f"""
        __global__ void k(const float* x, float* y, float* x2, int n) {{
            int i = threadIdx.x + blockIdx.x * blockDim.x;
            if (i < n) {{ {statement} }}
        }}""")
    assert roles(spec)["y"][0] == role


def test_accumulator_output_has_one_element_and_a_reduction():
    spec = inferred("""
        __global__ void total(const float* x, float* sum, int n) {
            int i = blockIdx.x * blockDim.x + threadIdx.x;
            if (i < n) atomicAdd(sum, x[i]);
        }""")
    assert roles(spec)["sum"] == ("inout", ("1",)) and spec.reduction == "n"


def test_two_dimensional_pattern():
    spec = inferred("""
        __global__ void transpose(const float* src, float* dst, int rows, int cols) {
            int col = blockIdx.x * blockDim.x + threadIdx.x;
            int row = blockIdx.y * blockDim.y + threadIdx.y;
            if (row < rows && col < cols) dst[col * rows + row] = src[row * cols + col];
        }""")
    assert roles(spec) == {
        "src": ("input", ("rows", "cols")),
        "dst": ("output", ("rows", "cols")),
        "rows": ("scalar", ()),
        "cols": ("scalar", ()),
    }
    assert spec.launch.block == (32, 8)
    assert spec.launch.grid == ("ceil_div(cols, block.x)", "ceil_div(rows, block.y)")
    assert spec.sizes == {"rows": 4096, "cols": 4096} and spec.verify_sizes == ({"rows": 1023, "cols": 1021},)
    _, launch = resolve(spec, spec.verify_sizes[0], block=(16, 16))
    assert launch.grid == (64, 64, 1)


@pytest.mark.parametrize(("rows", "cols"), [("height", "width"), ("M", "N"), ("ny", "nx")])
def test_two_dimensional_naming(rows: str, cols: str):
    spec = inferred(f"""
        __global__ void blur(int {cols}, int {rows}, const float* in, float* out) {{
            int x = blockIdx.x * blockDim.x + threadIdx.x, y = blockIdx.y * blockDim.y + threadIdx.y;
            if (x < {cols} && y < {rows}) out[y * {cols} + x] = in[y * {cols} + x];
        }}""")
    assert spec.launch.grid == (f"ceil_div({cols}, block.x)", f"ceil_div({rows}, block.y)")
    assert roles(spec)["out"] == ("output", (rows, cols))


@pytest.mark.parametrize(
    ("source", "pattern", "shapes"),
    [
        (  # a row's length named K: it is the one that scales the row index
            """__global__ void row_sums(const float* A, float* out, int N, int K) {
                int r = blockIdx.x * blockDim.x + threadIdx.x;
                if (r >= N) return;
                float s = 0.0f;
                for (int j = 0; j < K; ++j) s += A[r * K + j];
                out[r] = s;
            }""",
            "one-thread-per-row",
            {"A": ("N", "K"), "out": ("N",)},
        ),
        (  # the flat index split in two steps, the row's length as emb_size
            """__global__ void copy_rows(float* out, const float* table, int n, int emb_size) {
                int i = blockIdx.x * blockDim.x + threadIdx.x;
                if (i < n * emb_size) {
                    int t = i / emb_size, c = i % emb_size;
                    out[t * emb_size + c] = table[t * emb_size + c];
                }
            }""",
            "flattened element-wise",
            {"out": ("n", "emb_size"), "table": ("n", "emb_size")},
        ),
        (  # one block a row through a row pointer with a cast
            """__global__ void twice(const float* x, float* y, int batch, int dim) {
                const float* row = x + (size_t)blockIdx.x * dim;
                for (int c = threadIdx.x; c < dim; c += blockDim.x) y[blockIdx.x * dim + c] = 2.0f * row[c];
            }""",
            "one-block-per-row",
            {"x": ("batch", "dim"), "y": ("batch", "dim")},
        ),
    ],
)
def test_two_sizes_named_any_way_are_told_apart_by_which_scales_an_index(
    source: str, pattern: str, shapes: dict[str, tuple[str, ...]]
):
    spec = inferred(source)
    assert spec.inference_note.startswith(f"spec inferred from the {pattern} pattern")
    assert {name: shape for name, (_, shape) in roles(spec).items() if name in shapes} == shapes


def test_two_sizes_that_only_multiply_each_other_bound_a_flat_index():
    spec = inferred("""__global__ void fill(float* y, int p, int q) {
        int i = blockIdx.x * blockDim.x + threadIdx.x;
        if (i < p * q) y[i] = 1.0f;
    }""")
    assert roles(spec)["y"] == ("output", ("p*q",)) and spec.launch.grid == ("ceil_div(p*q, block.x)",)


def test_one_thread_per_row_with_a_row_sized_output():
    spec = inferred("""
        __global__ void row_sum(const float* x, float* sums, int rows, int cols) {
            int row = blockIdx.x * blockDim.x + threadIdx.x;
            if (row >= rows) return;
            const float* in = x + (size_t)row * cols;
            float total = 0.0f;
            for (int c = 0; c < cols; ++c) total += in[c];
            sums[row] = total;
        }""")
    assert spec.inference_note.startswith("spec inferred from the one-thread-per-row pattern")
    assert roles(spec)["x"] == ("input", ("rows", "cols")) and roles(spec)["sums"] == ("output", ("rows",))
    assert (spec.launch.block, spec.launch.grid) == ((256,), ("ceil_div(rows, block.x)",))


def test_one_block_per_row():
    spec = inferred("""
        __global__ void softmax(const float* x, float* y, int rows, int cols) {
            int row = blockIdx.x;
            for (int c = threadIdx.x; c < cols; c += blockDim.x) y[row * cols + c] = expf(x[row * cols + c]);
        }""")
    assert spec.inference_note.startswith("spec inferred from the one-block-per-row pattern")
    assert spec.launch.grid == ("rows",) and roles(spec)["y"] == ("output", ("rows", "cols"))


def test_flattened_rows_times_cols():
    spec = inferred("""
        __global__ void scale(float* y, const float* x, int rows, int cols) {
            int i = blockIdx.x * blockDim.x + threadIdx.x;
            int total = rows * cols;
            if (i < total) y[i] = 2.0f * x[i];
        }""")
    assert spec.launch.grid == ("ceil_div(rows * cols, block.x)",)


@pytest.mark.parametrize(
    "index",
    [
        "(blockIdx.x + blockIdx.y*gridDim.x) * blockDim.x + threadIdx.x",
        "(gridDim.x * blockIdx.y + blockIdx.x) * blockDim.x + threadIdx.x",
        "threadIdx.x + blockDim.x * (blockIdx.x + (blockIdx.y) * gridDim.x)",
    ],
)
def test_a_grid_made_one_line_of_blocks_is_one_dimensional(index: str) -> None:
    """darknet's and Caffe's index past the x dimension's old limit: a 1-D grid runs it the same (not an
    n x n square on 16 x 16 blocks, as it was read)."""
    spec = inferred(f"""
        __global__ void squared_gap(int n, const float *guess, const float *goal, float *gap, float *loss) {{
            int i = {index};
            if (i >= n) return;
            float g = goal[i] - guess[i];
            gap[i] = g;
            loss[i] = g * g;
        }}""")
    assert spec.inference_note.startswith("spec inferred from the 1-D element-wise pattern")
    assert (spec.launch.block, spec.launch.grid) == ((256,), ("ceil_div(n, block.x)",))
    assert roles(spec)["loss"] == ("output", ("n",))


def test_a_line_of_blocks_with_2d_threads_is_still_2d() -> None:
    spec = inferred("""
        __global__ void k(float* y, int n) {
            int i = (blockIdx.x + blockIdx.y * gridDim.x) * blockDim.x + threadIdx.x;
            if (i < n && threadIdx.y == 0) y[i] = 1.0f;
        }""")
    assert len(spec.launch.block) == 2 and len(spec.launch.grid) == 2


def test_an_array_indexed_along_a_loop_reaches_the_loops_bound() -> None:
    """A thread per column summing down the rows: `table[r * width + c]` with r < depth is depth x
    width, not a row of width (which the original would read past)."""
    spec = inferred("""
        __global__ void column_totals(const float *table, int depth, int width, float *totals) {
            int c = (blockIdx.x + blockIdx.y * gridDim.x) * blockDim.x + threadIdx.x;
            int r;
            if (c < width) {
                totals[c] = 0.0f;
                for (r = 0; r < depth; r++) totals[c] += table[r * width + c];
            }
        }""")
    assert spec.inference_note.startswith("spec inferred from the one-thread-per-column pattern")
    assert roles(spec)["table"] == ("input", ("depth", "width"))
    assert roles(spec)["totals"] == ("inout", ("width",))


@pytest.mark.parametrize(
    ("statement", "shapes"),
    [
        # a complex number's real and imaginary parts, interleaved
        ("pairs[2 * i] = src[i]; pairs[2 * i + 1] = 0.0;", {"src": ("n",), "pairs": ("2 * n",)}),
        ("pairs[i] = src[i + 1] - src[i];", {"src": ("n + 1",), "pairs": ("n",)}),
        ("pairs[i] = src[i * 2 + 1] + src[i - 1];", {"src": ("2 * n",), "pairs": ("n",)}),
        # an index the thread moves otherwise keeps the layout's shape
        ("int j = i + 5; pairs[i] = src[j];", {"src": ("n",), "pairs": ("n",)}),
    ],
)
def test_a_1d_kernel_s_buffers_reach_as_far_as_its_scaled_indices(statement: str, shapes: dict) -> None:
    """The last thread's `2 * i + 1` is element 2n - 1: the buffer is 2n long, not n (the original
    would write past it)."""
    source = f"""
        __global__ void interleave(const double *src, double *pairs, const int n) {{
            const int i = blockIdx.x * blockDim.x + threadIdx.x;
            if (i < n) {{ {statement} }}
        }}"""
    spec = inferred(source)
    assert {name: shape for name, (_, shape) in roles(spec).items() if shape} == shapes
    problem, _ = resolve(spec, spec.verify_sizes[0])
    written = render_spec(spec) + "\n" + source
    specs, errors = parse_specs(written, find_kernels(written))
    assert errors == [] and specs["interleave"].arguments == spec.arguments
    if shapes["pairs"] == ("2 * n",):
        assert problem.arguments[1].shape == (2 * 1_000_003,)


def test_blas_strides_are_one_verified_at_two_and_offsets_zero() -> None:
    """A BLAS-style update: the one size bounds the index, the others only stride it and move its start."""
    spec = inferred("""
        __global__ void scaled_add(int count, float a, const float *src, int src_at, int src_step,
                                   float *dst, int dst_at, int dst_step) {
            int k = blockDim.x * (blockIdx.x + gridDim.x * blockIdx.y) + threadIdx.x;
            if (k < count)
                dst[k * dst_step + dst_at] = dst[k * dst_step + dst_at] + a * src[src_at + src_step * k];
        }""")
    values = {a.name: a.value for a in spec.arguments if a.role == "scalar"}
    assert values == {
        "count": "count", "a": None, "src_at": 0, "src_step": "src_step", "dst_at": 0, "dst_step": "dst_step"
    }  # fmt: skip
    assert roles(spec)["src"] == ("input", ("count * src_step",))
    assert roles(spec)["dst"] == ("inout", ("count * dst_step",))
    assert spec.sizes == {"count": 16_777_216, "src_step": 1, "dst_step": 1}
    assert spec.verify_sizes == ({"count": 1_000_003, "src_step": 2, "dst_step": 2},)
    assert spec.launch.grid == ("ceil_div(count, block.x)",)
    problem, _ = resolve(spec, spec.verify_sizes[0])
    assert problem.arguments[2].shape == (2_000_006,)


def test_a_stride_alone_with_its_size_is_a_stride() -> None:
    """`v[i * step]` with i < count: count elements step apart (not count rows of step, as it was read)."""
    spec = inferred("""
        __global__ void halve_every(int count, float *v, int step) {
            int i = threadIdx.x + blockIdx.x * blockDim.x;
            if (i >= count) return;
            v[step * i] *= 0.5f;
        }""")
    assert roles(spec)["v"] == ("inout", ("count * step",)) and spec.sizes == {"count": 16_777_216, "step": 1}


@pytest.mark.parametrize(
    "body",
    [
        # the stride also bounds a loop: a row's length, not a stride
        "if (i < N) for (int j = 0; j < INCX; ++j) X[i * INCX + j] = 0;",
        # the index is computed outside the subscript
        "int k = i * INCX; if (i < N) X[k] = 0;",
        # a stride of something other than the bounded index
        "if (i < N) X[threadIdx.x * INCX] = 0;",
        # a constant moves it too: with INCX = 1 the last thread would pass N
        "if (i < N) X[i * INCX + 1] = 0;",
    ],
)
def test_an_integer_that_is_not_only_a_stride_or_an_offset_is_no_blas_stride(body: str) -> None:
    spec, _ = infer(f"""
        __global__ void k(int N, float *X, int INCX) {{
            int i = blockIdx.x * blockDim.x + threadIdx.x;
            {body}
        }}""")
    assert spec is None or "verified also at a stride" not in spec.inference_note


def test_rows_a_pitch_apart_are_verified_with_the_pitch_past_the_row() -> None:
    """Leading dimensions (`in[r * in_ld + c]`): each a size, a row's length at the benchmark and three
    elements more when verifying, each buffer [rows, its pitch]."""
    spec = inferred("""
        __global__ void abs_values(int n_rows, int n_cols, const float* in, int in_ld,
                                   float* out, int out_ld) {
            for (int r = threadIdx.y + blockDim.y * blockIdx.y; r < n_rows; r += gridDim.y * blockDim.y) {
                for (int c = threadIdx.x + blockDim.x * blockIdx.x; c < n_cols; c += gridDim.x * blockDim.x)
                    out[c + r * out_ld] = fabsf(in[r * in_ld + c]);
            }
        }""")
    assert spec.inference_note.startswith("spec inferred from the 2-D pitched pattern")
    assert roles(spec)["in"] == ("input", ("n_rows", "in_ld"))
    assert roles(spec)["out"] == ("output", ("n_rows", "out_ld"))
    assert spec.sizes == {"n_rows": 4096, "n_cols": 4096, "in_ld": 4096, "out_ld": 4096}
    assert spec.verify_sizes == ({"n_rows": 1023, "n_cols": 1021, "in_ld": 1024, "out_ld": 1024},)
    assert spec.launch.grid == ("ceil_div(n_cols, block.x)", "ceil_div(n_rows, block.y)")


def test_a_pitch_through_a_local_index() -> None:
    spec = inferred("""
        __global__ void blend(float *mixed, const float *fore, const float *back, float alpha,
                              int width, int height, int pitch) {
            const int x = threadIdx.x + blockIdx.x * blockDim.x;
            const int y = threadIdx.y + blockIdx.y * blockDim.y;
            if (x >= width || y >= height) return;
            const int at = x + y * pitch;
            mixed[at] = alpha * fore[at] + (1.0f - alpha) * back[at];
        }""")
    assert {name: shape for name, (_, shape) in roles(spec).items() if shape} == dict.fromkeys(
        ("mixed", "fore", "back"), ("height", "pitch")
    )


@pytest.mark.parametrize(
    "statements",
    [
        # the pitch also sizes a plane: more than a row's pitch
        "int sz = height * pitch; int p = y * pitch + x; if (x < width && y < height) r[p] = d[p + sz];",
        # interleaved channels: the index is not y * pitch + x
        "if (x < width && y < height) r[(y * pitch + x) * 3] = d[y * pitch + x];",
        # the local index is used otherwise too
        "int p = y * pitch + x; if (x < width && y < height) r[p] = d[p] + p;",
    ],
)
def test_an_integer_that_is_not_only_a_row_pitch_is_no_pitch(statements: str) -> None:
    spec, _ = infer(f"""
        __global__ void k(float *r, const float *d, int width, int pitch, int height) {{
            const int x = blockIdx.x * blockDim.x + threadIdx.x;
            const int y = blockIdx.y * blockDim.y + threadIdx.y;
            {statements}
        }}""")
    assert spec is None or "pitched" not in spec.inference_note


def test_template_kernel_is_instantiated_with_float():
    spec = inferred("""
        template <typename T, int UNROLL = 4>
        __global__ void relu(const T* x, T* y, int n) {
            int i = blockIdx.x * blockDim.x + threadIdx.x;
            if (i < n) y[i] = x[i] > T(0) ? x[i] : T(0);
        }""")
    assert spec.instantiate == "relu<float, 4>"
    assert [a.dtype for a in spec.arguments] == ["float32", "float32", "int32"]


def test_half_and_double_element_types():
    spec = inferred("""
        __global__ void cast(const __half* x, double* y, unsigned int n) {
            unsigned int i = blockIdx.x * blockDim.x + threadIdx.x;
            if (i < n) y[i] = __half2float(x[i]);
        }""")
    assert [a.dtype for a in spec.arguments] == ["float16", "float64", "uint32"]


ELEMENT_WISE_BODY = "{ int i = blockIdx.x * blockDim.x + threadIdx.x; y[i] = x[i]; }"


@pytest.mark.parametrize(
    ("source", "reason"),
    [
        (
            "__global__ void mm(const float* a, float* c, int M, int N, int K) { c[0] = a[0]; }",
            "no bound on the global index",
        ),
        ("__global__ void k(const float* x, float* y) " + ELEMENT_WISE_BODY, "found 0"),
        (
            "__global__ void k(const Particle* x, Particle* y, int n) { y[0] = x[0]; }",
            "'const Particle* x': element type Particle* is not a plain number",
        ),
        ("__global__ void k(float** x, int n) { x[0][0] = 1; }", "type float** is not a plain number"),
        (
            "template <typename T, typename F>\n__global__ void k(const T* x, T* y, int n, F f) "
            "{ int i = blockIdx.x * blockDim.x + threadIdx.x; if (i < n) y[i] = f(x[i]); }",
            "f: a functor",
        ),
        ("template <int B>\n__global__ void k(float* y, int n) { y[0] = B; }", "with a value parameter"),
        (
            "__global__ void k(const float* x, int n) { int i = blockIdx.x * blockDim.x + threadIdx.x; }",
            "no pointer is written",
        ),
        (
            "__global__ void k(float* y, int a, int b) { y[blockIdx.x * blockDim.x + threadIdx.x] = a; }",
            "two integer parameters (a, b) not named like rows/cols",
        ),
        ("__global__ void k(float* y, int n) { y[blockIdx.x] = n; }", "no element-wise index"),
        (
            "__global__ void k(float* y, int n) { int i = blockIdx.y * blockDim.y + threadIdx.y; y[i] = 0; }",
            "indexes in 2-D",
        ),
        (
            "struct P { float a; };\n__global__ void k(P p, float* y, int n) { y[0] = p.a; }",
            "is not a number",
        ),
    ],
)
def test_refuses_unusual_signatures_with_a_reason(source: str, reason: str):
    spec, why = infer(source)
    assert spec is None
    assert reason in why


def test_an_inferred_spec_renders_to_a_comment_that_parses_back():
    source = """__global__ void saxpy(int n, float a, const float* x, float* y) {
    int i = blockIdx.x * blockDim.x + threadIdx.x;
    if (i < n) y[i] = a * x[i] + y[i];
}
"""
    spec = inferred(source)
    text = render_spec(spec)
    assert text.splitlines()[1] == f"# {spec.inference_note}"
    # The note already says to check the roles, shapes and sizes: no second comment line saying it again.
    assert spec.inference_note.endswith("check roles, shapes and sizes")
    assert text.splitlines()[2] == 'kernel = "saxpy"'
    written = text + "\n" + source
    specs, errors = parse_specs(written, find_kernels(written))
    assert errors == []
    assert specs["saxpy"] == replace(spec, inferred=False, inference_note="")


def test_namespaced_template_and_explicit_specialisation_name_their_instantiation():
    body = "{ int i = blockIdx.x * blockDim.x + threadIdx.x; if (i < n) y[i] = x[i]; }"
    spec = inferred(
        f"namespace ops {{ template <typename T>\n__global__ void k(const T* x, T* y, int n) {body} }}"
    )
    assert spec.instantiate == "ops::k<float>"
    spec = inferred(f"template <> __global__ void k<double>(const double* x, double* y, int n) {body}")
    assert spec.instantiate == "k<double>" and spec.arguments[0].dtype == "float64"


def test_every_example_kernel_has_a_written_or_inferred_spec():
    for path in sorted((Path(__file__).parent.parent / "examples").glob("*.cu")):
        source = path.read_text(encoding="utf-8")
        kernels = find_kernels(source)
        specs, errors = parse_specs(source, kernels)
        assert errors == [], path
        for kernel in kernels:
            assert kernel.name in specs or infer_spec(kernel, source)[0] is not None, (path, kernel.name)


# -- sizes fixed by the file's #defines ----------------------------------------------------------------


def test_a_gemv_with_its_sizes_in_defines_is_one_thread_per_row_at_those_sizes():
    spec = inferred("""
        #define ROWS 4096
        #define COLS 2048
        #define BLOCK 256
        __global__ void gemv_fixed(const float* A, const float* x, float* y) {
            int row = blockIdx.x * blockDim.x + threadIdx.x;
            if (row < ROWS) {
                float acc = 0.0f;
                for (int j = 0; j < COLS; ++j) acc += A[row * COLS + j] * x[j];
                y[row] = acc;
            }
        }""")
    assert spec.inference_note.startswith("spec inferred from the one-thread-per-row pattern")
    assert "ROWS = 4096, COLS = 2048 as the file's #defines fix them" in spec.inference_note
    # the kernel is compiled for these sizes: it runs and is verified at them alone
    assert spec.sizes == {"ROWS": 4096, "COLS": 2048} and spec.verify_sizes == ({"ROWS": 4096, "COLS": 2048},)
    # x is read along the loop over the columns: a row's length, not a column's (2048, not 4096)
    assert roles(spec) == {
        "A": ("input", ("ROWS", "COLS")),
        "x": ("input", ("COLS",)),
        "y": ("output", ("ROWS",)),
    }
    assert spec.launch.grid == ("ceil_div(ROWS, block.x)",)


def test_an_element_wise_kernel_with_its_length_in_a_define():
    spec = inferred("""
        #define N (1 << 20)
        #define THREADS 256
        __global__ void scale(const float* in, float* out, float s) {
            __shared__ float unused[THREADS];
            int i = blockIdx.x * blockDim.x + threadIdx.x;
            if (i < N) out[i] = s * in[i];
        }""")
    assert spec.sizes == {"N": 1 << 20} and roles(spec)["out"] == ("output", ("N",))


@pytest.mark.parametrize(
    "defines",
    [
        # a matmul's three sizes: rows, cols and a depth the 2-D layout has no place for
        "#define M 512\n#define N 512\n#define K 256",
        # defined in two branches: which one the compile takes is not known here
        "#ifdef BIG\n#define M 4096\n#else\n#define M 512\n#endif\n#define N 512\n#define K 256",
    ],
)
def test_sizes_fixed_in_ways_the_layouts_do_not_cover_are_refused(defines: str):
    spec, note = infer(
        defines
        + """
        __global__ void matmul(const float* A, const float* B, float* C) {
            int row = blockIdx.y * blockDim.y + threadIdx.y;
            int col = blockIdx.x * blockDim.x + threadIdx.x;
            if (row < M && col < N) {
                float s = 0.0f;
                for (int k = 0; k < K; ++k) s += A[row * K + k] * B[k * N + col];
                C[row * N + col] = s;
            }
        }"""
    )
    assert spec is None and "expected one integer size (n) or two (rows, cols); found 0" in note


# -- contractions over three sizes ----------------------------------------------------------------------

MATMUL_3 = """
    __global__ void matmul(const float* A, const float* B, float* C, int M, int N, int K) {
        int row = blockIdx.y * blockDim.y + threadIdx.y;
        int col = blockIdx.x * blockDim.x + threadIdx.x;
        if (row < M && col < N) {
            float sum = 0.0f;
            for (int k = 0; k < K; k++) sum += A[row * K + k] * B[k * N + col];
            C[row * N + col] = sum;
        }
    }"""


def test_a_matmul_with_three_sizes_is_a_2d_contraction():
    spec = inferred(MATMUL_3)
    assert spec.inference_note.startswith("spec inferred from the 2-D contraction pattern")
    assert roles(spec) == {
        "A": ("input", ("M", "K")),
        "B": ("input", ("K", "N")),
        "C": ("output", ("M", "N")),
        "M": ("scalar", ()),
        "N": ("scalar", ()),
        "K": ("scalar", ()),
    }
    assert spec.sizes == {"M": 1024, "N": 1024, "K": 1024}
    assert spec.verify_sizes == ({"M": 129, "N": 67, "K": 100},)  # ragged tiles every way
    assert spec.launch.block == (16, 16)
    assert spec.launch.grid == ("ceil_div(N, block.x)", "ceil_div(M, block.y)")


def test_the_shapes_follow_the_indices_whatever_the_names_and_strides():
    # A . B^T with other names, the parameters in another order, a bias along the columns
    spec = inferred("""
        __global__ void linear(float* out, const float* x, const float* w, const float* bias,
                               int in_features, int batch, int out_features) {
            int o = blockIdx.x * blockDim.x + threadIdx.x;
            int b = blockIdx.y * blockDim.y + threadIdx.y;
            if (b >= batch || o >= out_features) return;
            float acc = bias[o];
            for (int i = 0; i < in_features; ++i) acc += x[b * in_features + i] * w[o * in_features + i];
            out[b * out_features + o] = acc;
        }""")
    shapes = {name: shape for name, (_, shape) in roles(spec).items() if shape}
    assert shapes == {
        "out": ("batch", "out_features"),
        "x": ("batch", "in_features"),
        "w": ("out_features", "in_features"),
        "bias": ("out_features",),
    }


def test_three_sizes_without_a_loop_to_one_of_them_are_sized_by_their_reach():
    # no contraction (one term an output, the last k): each buffer as far as its indices reach
    spec, note = infer(MATMUL_3.replace("for (int k = 0; k < K; k++) sum +=", "int k = K - 1; sum +="))
    assert spec is not None and "2-D over several sizes" in note
    assert roles(spec) == {
        "A": ("input", ("K*M",)),
        "B": ("input", ("K*N",)),
        "C": ("output", ("M*N",)),
        "M": ("scalar", ()),
        "N": ("scalar", ()),
        "K": ("scalar", ()),
    }


# -- one size on 2-D blocks -------------------------------------------------------------------------------

SQUARE_MATMUL = """
    __global__ void matmul(const float* A, const float* B, float* C, int N) {
        int row = blockIdx.y * blockDim.y + threadIdx.y;
        int col = blockIdx.x * blockDim.x + threadIdx.x;
        if (row < N && col < N) {
            float s = 0;
            for (int k = 0; k < N; ++k) s += A[row * N + k] * B[k * N + col];
            C[row * N + col] = s;
        }
    }"""


def test_a_square_matmul_with_one_size_is_n_by_n_at_a_cubic_friendly_size():
    spec = inferred(SQUARE_MATMUL)
    assert spec.inference_note.startswith("spec inferred from the square 2-D contraction pattern")
    assert spec.sizes == {"N": 1024} and spec.verify_sizes == ({"N": 129},)
    assert {name: shape for name, (_, shape) in roles(spec).items() if shape} == {
        "A": ("N", "N"),
        "B": ("N", "N"),
        "C": ("N", "N"),
    }
    assert spec.launch.grid == ("ceil_div(N, block.x)", "ceil_div(N, block.y)")


def test_a_square_element_wise_kernel_with_one_size():
    spec = inferred("""
        __global__ void madd(const float* a, const float* b, float* c, int n) {
            int i = blockIdx.y * blockDim.y + threadIdx.y;
            int j = blockIdx.x * blockDim.x + threadIdx.x;
            if (i < n && j < n) c[i * n + j] = a[i * n + j] + b[i * n + j];
        }""")
    assert spec.inference_note.startswith("spec inferred from the square 2-D pattern")
    assert spec.sizes == {"n": 4096} and roles(spec)["c"] == ("output", ("n", "n"))


def test_one_size_on_2d_blocks_without_both_indices_bounded_by_it_is_refused():
    spec, note = infer(SQUARE_MATMUL.replace("if (row < N && col < N)", "if (row < N)"))
    assert spec is None and "but the signature has one size (N)" in note


TILED_TRANSPOSE = """
    #define TILE 32
    __global__ void transpose(const float* in, float* out, int n) {
        __shared__ float tile[TILE][TILE + 1];
        int x = blockIdx.x * TILE + threadIdx.x, y = blockIdx.y * TILE + threadIdx.y;
        if (x < n && y < n) tile[threadIdx.y][threadIdx.x] = in[y * n + x];
        __syncthreads();
        x = blockIdx.y * TILE + threadIdx.x;
        y = blockIdx.x * TILE + threadIdx.y;
        if (x < n && y < n) out[y * n + x] = tile[threadIdx.x][threadIdx.y];
    }"""

TILED_MATMUL = """
    #define BLOCKSIZE 16
    __global__ void matmul_tiled(const float* A, const float* B, float* C, int M, int N, int K) {
        __shared__ float As[BLOCKSIZE][BLOCKSIZE], Bs[BLOCKSIZE][BLOCKSIZE];
        int row = blockIdx.y * BLOCKSIZE + threadIdx.y;
        int col = blockIdx.x * BLOCKSIZE + threadIdx.x;
        float acc = 0.0f;
        for (int t = 0; t < K / BLOCKSIZE; ++t) {
            As[threadIdx.y][threadIdx.x] = A[row * K + t * BLOCKSIZE + threadIdx.x];
            Bs[threadIdx.y][threadIdx.x] = B[(t * BLOCKSIZE + threadIdx.y) * N + col];
            __syncthreads();
            for (int k = 0; k < BLOCKSIZE; ++k) acc += As[threadIdx.y][k] * Bs[k][threadIdx.x];
            __syncthreads();
        }
        if (row < M && col < N) C[row * N + col] = acc;
    }"""


def test_2d_indices_stepped_by_a_constant_tile_get_a_tile_by_tile_block():
    """The block must be TILE x TILE for such a kernel to cover its square; its grid is counted in tiles
    (a block tuned to another shape would leave parts uncovered, and verification says so), and it is
    verified at a multiple of the tile (tutorial kernels load their tiles without bounds checks)."""
    spec = inferred(TILED_TRANSPOSE)
    assert spec.launch.block == (32, 32)
    assert spec.launch.grid == ("ceil_div(n, 32)", "ceil_div(n, 32)")
    assert spec.verify_sizes == ({"n": 9 * 32},) and spec.sizes == {"n": 4096}
    assert roles(spec)["out"] == ("output", ("n", "n"))


def test_a_rows_by_cols_kernel_stepped_by_a_tile_gets_the_tile_as_block():
    source = TILED_TRANSPOSE.replace("int n)", "int rows, int cols)").replace("y < n", "y < rows")
    spec = inferred(source.replace("x < n", "x < cols").replace("* n +", "* cols +"))
    assert spec.launch.block == (32, 32)
    assert spec.launch.grid == ("ceil_div(cols, 32)", "ceil_div(rows, 32)")
    assert spec.verify_sizes == ({"rows": 288, "cols": 160},)


def test_a_shared_memory_tiled_matmul_over_three_sizes_gets_its_tile_as_block():
    spec = inferred(TILED_MATMUL)
    assert spec.launch.block == (16, 16)
    assert spec.launch.grid == ("ceil_div(N, 16)", "ceil_div(M, 16)")
    assert spec.verify_sizes == ({"M": 144, "N": 80, "K": 112},)
    assert {name: shape for name, (_, shape) in roles(spec).items() if shape} == {
        "A": ("M", "K"),
        "B": ("K", "N"),
        "C": ("M", "N"),
    }


def test_a_tiled_matmul_that_checks_no_bounds_covers_its_square_in_whole_tiles():
    """The textbook's first tiled matmul: `r = by * TILE + ty` through locals, no bounds check,
    n a multiple of the tile (as the verify size is)."""
    spec = inferred((ROOT / "tests" / "kernels" / "tiled" / "textbook_matmul_unchecked.cu").read_text())
    assert spec.inference_note.startswith("spec inferred from the square 2-D contraction pattern")
    assert spec.launch.block == (16, 16) and spec.verify_sizes == ({"n": 144},)
    assert spec.sizes == {"n": 1024} and roles(spec)["prod"] == ("output", ("n", "n"))


def test_a_square_kernel_on_blockdim_steps_that_checks_no_bounds_is_still_refused():
    # any block covers a blockDim-stepped range only with a bounds check: without one, no size is safe
    spec, note = infer(SQUARE_MATMUL.replace("if (row < N && col < N) {", "{"))
    assert spec is None and "but the signature has one size (N)" in note


def test_tiles_stepped_through_a_24_bit_multiply_are_tiles_too():
    # image-processing code of the CUDA 1.x era: `__mul24(blockIdx.x, 16) + threadIdx.x`
    spec = inferred("""
        __global__ void darken(const float* src, float* dst, int width, int height) {
            const int col = threadIdx.x + __mul24(16, blockIdx.x);
            const int row = threadIdx.y + __mul24(16, blockIdx.y);
            if (col < width && row < height) {
                const int at = col + __mul24(row, width);
                dst[at] = 0.5f * src[at];
            }
        }""")
    assert spec.launch.block == (16, 16)
    assert spec.launch.grid == ("ceil_div(width, 16)", "ceil_div(height, 16)")


def test_an_index_moved_by_a_size_in_a_loop_steps_no_block():
    """`col += nx` redefines a global index from a size alone: it says nothing of the block's steps."""
    spec = inferred("""
        __global__ void flip_by_rows(float* dst, const float* src, const int nx, const int ny) {
            unsigned int gx = threadIdx.x + blockIdx.x * blockDim.x;
            unsigned int gy = threadIdx.y + blockIdx.y * blockDim.y;
            unsigned int line = gx + gy * blockDim.x * gridDim.x;
            if (line >= ny) return;
            int to = line;
            for (int from = line * nx; from < line * nx + nx; ++from) {
                dst[to] = src[from];
                to += nx;
            }
        }""")
    assert spec.launch.block == (32, 8)


def test_2d_steps_that_cannot_be_read_keep_the_32_by_8_block():
    # `32*bx + 32*w*by`: no one tile for both axes, as written; the 2-D layout's block, as before
    spec = inferred("""
        __global__ void lift(const float* in, float* out, int w, int h) {
            int bx = blockIdx.x, by = blockIdx.y, tx = threadIdx.x, ty = threadIdx.y;
            int at = tx + 32*bx + w*ty + 32*w*by;
            out[at] = fminf(in[at] + 0.25f, 1.0f);
        }""")
    assert spec.launch.block == (32, 8)


def test_a_tiled_matmul_whose_inner_product_steps_by_four_is_still_square_tiles():
    unrolled = TILED_MATMUL.replace(
        "for (int k = 0; k < BLOCKSIZE; ++k) acc += As[threadIdx.y][k] * Bs[k][threadIdx.x];",
        "for (int k = 0; k < BLOCKSIZE; k += 2) {\n"
        "                acc += As[threadIdx.y][k] * Bs[k][threadIdx.x];\n"
        "                acc += As[threadIdx.y][k + 1] * Bs[k + 1][threadIdx.x];\n"
        "            }",
    )
    assert unrolled != TILED_MATMUL
    assert inferred(unrolled).launch.block == (16, 16)


@pytest.mark.parametrize(
    ("change", "why"),
    [
        (("y = blockIdx.y * TILE", "y = blockIdx.y * 16"), "the two axes step by different tiles"),
        (("#define TILE 32", "#define TILE 64"), "a 64 x 64 block has more threads than a block may"),
        (("#define TILE 32", "#define TILE 32\n#define TILE 16"), "the tile is defined twice"),
        (("#define TILE 32", ""), "the tile's value is not in the file"),
        (
            (
                "if (x < n && y < n) tile[threadIdx.y][threadIdx.x] = in[y * n + x];",
                "for (int j = 0; j < TILE; j += 8) tile[threadIdx.y + j][threadIdx.x] = in[(y + j) * n + x];",
            ),
            "each thread covers several rows: the block is TILE x 8",
        ),
    ],
)
def test_2d_indices_stepped_by_no_single_known_tile_are_refused(change: tuple[str, str], why: str) -> None:
    source = TILED_TRANSPOSE.replace(*change, 1)
    assert source != TILED_TRANSPOSE
    spec, note = infer(source)
    assert spec is None and "step blocks by something other than blockDim or one constant" in note, why


def test_a_tile_and_sizes_defined_in_the_files_own_header_count(tmp_path: Path) -> None:
    """Kernels extracted with `#include "includes.h"` (a dataset of public kernels, course code with a
    common.h) define their TILE and sizes there; two files with the same kernel text and different headers
    get each their own spec (what the kernel alone says is kept by the #defines it names)."""
    from cuda_agent.agent.targets import load_targets

    kernel = TILED_TRANSPOSE.replace("#define TILE 32", '#include "includes.h"')
    for folder, tile in (("a", 16), ("b", 8)):
        (tmp_path / folder).mkdir()
        (tmp_path / folder / "includes.h").write_text(f"#pragma once\n#define TILE {tile}\n")
        (tmp_path / folder / "transpose.cu").write_text(kernel)
        (target,) = load_targets(tmp_path / folder / "transpose.cu").targets
        assert target.spec is not None, target.note
        assert target.spec.launch.block == (tile, tile)
    fixed = '#include "includes.h"\n__global__ void k(const float* a, float* c) {\n'
    fixed += "    int i = blockIdx.x * blockDim.x + threadIdx.x;\n    if (i < N) c[i] = 2.0f * a[i];\n}\n"
    (tmp_path / "a" / "includes.h").write_text("#define N (1024 * 1024)\n")
    (tmp_path / "a" / "fixed.cu").write_text(fixed)
    (target,) = load_targets(tmp_path / "a" / "fixed.cu").targets
    assert target.spec is not None and target.spec.sizes == {"N": 1024 * 1024}, target.note


# -- tolerances of sums ---------------------------------------------------------------------------------


def test_an_output_summed_in_a_loop_scales_its_tolerance_with_the_loops_length() -> None:
    """A rewrite that splits or tiles a sum rounds it otherwise: the reduction length scales the
    tolerance at each size checked (K of a matmul, the row's length, a tiled loop's size)."""
    assert inferred(MATMUL_3).reduction == "K"
    row_sum = inferred("""
        __global__ void row_sum(const float* x, float* sums, int rows, int cols) {
            int row = blockIdx.x * blockDim.x + threadIdx.x;
            if (row >= rows) return;
            double total = 0;
            for (int c = 0; c < cols; ++c) total = total + x[(size_t)row * cols + c];
            sums[row] = (float)total;
        }""")
    assert row_sum.reduction == "cols"
    # phases and a #defined TILE: the loops' size names
    tiled = inferred((ROOT / "tests" / "kernels" / "tiled" / "textbook_matmul.cu").read_text())
    assert tiled.reduction == "n"
    # at the benchmark's K = 1024 and at the verify size's K = 100
    for k in (1024, 100):
        problem, _ = resolve(inferred(MATMUL_3), {"K": k})
        assert problem.tolerances["C"].atol == pytest.approx(max(1e-4 * k**0.5, 2.0 * 2.0**-24 * k))


def test_an_integer_counter_or_a_max_in_a_loop_is_no_sum() -> None:
    strided = inferred("""
        __global__ void scale(float* x, float a, int n) {
            for (int i = blockIdx.x * blockDim.x + threadIdx.x; i < n; i += blockDim.x * gridDim.x)
                x[i] *= a;
        }""")
    assert strided.reduction is None
    row_max = inferred("""
        __global__ void row_max(const float* x, float* out, int rows, int cols) {
            int row = blockIdx.x * blockDim.x + threadIdx.x;
            if (row >= rows) return;
            float best = x[(size_t)row * cols];
            for (int c = 1; c < cols; ++c) best = fmaxf(best, x[(size_t)row * cols + c]);
            out[row] = best;
        }""")
    assert row_max.reduction is None


# -- blocks the indices name ------------------------------------------------------------------------------


def test_an_index_that_steps_blocks_by_a_constant_gets_that_block() -> None:
    """`blockIdx.x * THREADS + threadIdx.x` covers the range only on THREADS-thread blocks: a 256-thread
    block would compute every other run of THREADS twice and leave the rest unwritten."""
    one_d = inferred("""
        #define THREADS 128
        __global__ void shift(const float* in, float* out, int n) {
            const int i = blockIdx.x * THREADS + threadIdx.x;
            if (i < n) out[i] = in[i] + 1.0f;
        }""")
    assert (one_d.launch.block, one_d.launch.grid) == ((128,), ("ceil_div(n, 128)",))
    assert "block 128" in one_d.inference_note
    # each axis its own constant, through a local index (x + y * pitch)
    two_d = inferred("""
        #define TILE_W 32
        #define TILE_H 16
        __global__ void blend(const float* top, const float* bottom, float alpha, float* mixed, int height,
                              int width, int pitch) {
            const int x = blockIdx.x * TILE_W + threadIdx.x;
            const int y = blockIdx.y * TILE_H + threadIdx.y;
            const int at = x + y * pitch;
            if (y < height && x < width) mixed[at] = alpha * top[at] + (1.0f - alpha) * bottom[at];
        }""")
    assert (two_d.launch.block, two_d.launch.grid) == (
        (32, 16),
        ("ceil_div(width, 32)", "ceil_div(height, 16)"),
    )
    assert "block 32 × 16" in two_d.inference_note
    _, launch = resolve(two_d, two_d.verify_sizes[0])
    assert launch.block == (32, 16, 1) and launch.grid[:2] == (-(-1021 // 32), -(-1023 // 16))


def test_steps_of_blockdim_or_a_tile_strided_by_rows_keep_the_layouts_block() -> None:
    plain = inferred("""
        __global__ void shift(const float* in, float* out, int n) {
            int i = blockIdx.x * blockDim.x + threadIdx.x;
            if (i < n) out[i] = in[i] + 1.0f;
        }""")
    assert (plain.launch.block, plain.launch.grid) == ((256,), ("ceil_div(n, block.x)",))
    too_big = infer("""
        #define SIDE 64
        __global__ void shift(const float* in, float* out, int rows, int cols) {
            int c = blockIdx.x * SIDE + threadIdx.x, r = blockIdx.y * SIDE + threadIdx.y;
            if (r < rows && c < cols) out[r * cols + c] = in[r * cols + c] + 1.0f;
        }""")
    assert too_big[0] is None and "4096 threads, over 1024" in too_big[1]


def test_a_value_read_through_the_index_is_data_not_an_index() -> None:
    """A thread per row written with a line of blocks, the loop variable declared before its loops and the
    row's values held in locals (`float magnitude = fabsf(in[...])`, as first drafts do): the locals read
    from memory are data, so the row count alone bounds the threads (it was read as rows x cols threads,
    flattened)."""
    spec = inferred((ROOT / "tests" / "kernels" / "line_of_blocks_row_norm.cu").read_text())
    assert spec.inference_note.startswith("spec inferred from the one-thread-per-row pattern")
    assert spec.launch.grid == ("ceil_div(rows, block.x)",)
    assert roles(spec)["in"] == ("input", ("rows", "cols")) and roles(spec)["out"] == (
        "output",
        ("rows", "cols"),
    )


def test_a_buffer_of_vector_types_is_its_components_with_a_trailing_axis():
    """float4 points, uchar4 pixels, cuFFT's complex numbers: each element is `lanes` components, 16, 4
    or 8 bytes apart as the kernel reads them, so the buffer is that many times longer than the index."""
    points = inferred("""
        __global__ void point_norms(const float4* __restrict__ p, float* norm, int n) {
            int i = blockIdx.x * blockDim.x + threadIdx.x;
            if (i < n) { float4 v = p[i]; norm[i] = sqrtf(v.x * v.x + v.y * v.y + v.z * v.z); }
        }""")
    assert roles(points) == {"p": ("input", ("n", "4")), "norm": ("output", ("n",)), "n": ("scalar", ())}
    dtypes = {a.name: a.dtype for a in points.arguments if a.role != "scalar"}
    assert dtypes == {"p": "float32", "norm": "float32"}
    problem, _ = resolve(points)
    assert {a.name: a.numel for a in problem.arguments if a.is_buffer} == {
        "p": 4 * points.sizes["n"],
        "norm": points.sizes["n"],
    }
    pixels = inferred("""
        __global__ void to_gray(const uchar4* rgba, unsigned char* gray, int rows, int cols) {
            int x = blockIdx.x * blockDim.x + threadIdx.x, y = blockIdx.y * blockDim.y + threadIdx.y;
            if (x < cols && y < rows) {
                uchar4 px = rgba[y * cols + x];
                gray[y * cols + x] = (unsigned char)(0.299f * px.x + 0.587f * px.y + 0.114f * px.z);
            }
        }""")
    assert roles(pixels)["rgba"] == ("input", ("rows", "cols", "4"))
    assert next(a.dtype for a in pixels.arguments if a.name == "rgba") == "uint8"
    source = """
        typedef float2 Complex;
        __global__ void scale_spectrum(Complex* data, int n, float scale) {
            int i = blockIdx.x * blockDim.x + threadIdx.x;
            if (i < n) { data[i].x *= scale; data[i].y *= scale; }
        }"""
    spectrum, note = infer_spec(find_kernels(source)[0], source, typedefs={"Complex": "float2"})
    assert spectrum is not None, note
    assert roles(spectrum)["data"] == ("inout", ("n", "2"))
    # by value, a vector is no number the sandbox passes: refused with the reason
    spec, note = infer("__global__ void k(float2 c, float* y, int n) { y[0] = c.x; }")
    assert spec is None and "float2" in note


def test_a_bool_flag_is_run_true_and_sizes_nothing_and_a_bool_buffer_holds_zeros_and_ones():
    clamp = inferred("""
        __global__ void scale_clamp(float* x, int n, float s, bool clamp) {
            int i = blockIdx.x * blockDim.x + threadIdx.x;
            if (i < n) { float v = x[i] * s; x[i] = clamp ? fminf(fmaxf(v, 0.f), 1.f) : v; }
        }""")
    flag = next(a for a in clamp.arguments if a.name == "clamp")
    assert (flag.role, flag.dtype, flag.value) == ("scalar", "uint8", 1)
    assert roles(clamp)["x"] == ("inout", ("n",))  # one size, n: the flag is not a second one
    masked = inferred("""
        __global__ void masked_copy(const float* x, const bool* keep, float* y, int n) {
            int i = blockIdx.x * blockDim.x + threadIdx.x;
            if (i < n) y[i] = keep[i] ? x[i] : 0.0f;
        }""")
    keep = next(a for a in masked.arguments if a.name == "keep")
    assert keep.dtype == "uint8" and keep.init == InitSpec("integers", low=0, high=2)
    # the spec as written back into the file reads the same
    written = render_spec(masked) + MASKED_KERNEL
    specs, errors = parse_specs(written, find_kernels(written))
    assert not errors and specs["masked_copy"].arguments == masked.arguments


MASKED_KERNEL = """
__global__ void masked_copy(const float* x, const bool* keep, float* y, int n) {
    int i = blockIdx.x * blockDim.x + threadIdx.x;
    if (i < n) y[i] = keep[i] ? x[i] : 0.0f;
}
"""


@pytest.mark.gpu
def test_vector_and_bool_buffers_run_inside_their_bounds_and_rewrites_verify_on_the_gpu(tmp_path: Path):
    """The sandbox passes a bool flag as one byte and a float4/uchar4 buffer as its components: the
    originals must run inside their buffers at the inferred sizes, and first-round rewrites verify."""
    from cuda_agent.agent.engine import Engine, EngineSettings
    from cuda_agent.agent.optimize import PROPOSERS
    from cuda_agent.agent.search import _first_round, interleave
    from cuda_agent.agent.targets import load_targets

    path = tmp_path / "mixed.cu"
    path.write_text(VECTOR_AND_BOOL_KERNELS)
    proposers = {name: p for name, p in PROPOSERS.items() if name != "llm"}
    with Engine(EngineSettings(use_cache=False, input_sets=2)) as engine:
        targets = load_targets(path).targets
        assert [t.spec is not None for t in targets] == [True] * 3, [t.note for t in targets]
        for target in targets:
            baseline = engine.baseline(target)
            assert baseline.usable, (target.kernel.name, baseline.error)
            results = engine.evaluate(baseline, interleave(_first_round(target, proposers, []))[:4])
            # fast math may round a pixel otherwise (exact uint8 outputs): one verified rewrite is enough
            assert any(r.verified for r in results), [
                (r.candidate.description, r.error) for r in results if not r.verified
            ]


VECTOR_AND_BOOL_KERNELS = """
__global__ void point_norms(const float4* __restrict__ p, float* norm, int n, bool squared) {
    int i = blockIdx.x * blockDim.x + threadIdx.x;
    if (i < n) {
        float4 v = p[i];
        float s = v.x * v.x + v.y * v.y + v.z * v.z;
        norm[i] = squared ? s : sqrtf(s);
    }
}
__global__ void to_gray(const uchar4* rgba, unsigned char* gray, int rows, int cols) {
    int x = blockIdx.x * blockDim.x + threadIdx.x, y = blockIdx.y * blockDim.y + threadIdx.y;
    if (x < cols && y < rows) {
        uchar4 px = rgba[y * cols + x];
        gray[y * cols + x] = (unsigned char)(0.299f * px.x + 0.587f * px.y + 0.114f * px.z);
    }
}
__global__ void masked_copy(const float* x, const bool* keep, float* y, int n) {
    int i = blockIdx.x * blockDim.x + threadIdx.x;
    if (i < n) y[i] = keep[i] ? x[i] : 0.0f;
}
"""


def test_the_grid_runs_x_over_the_size_the_x_index_is_compared_with():
    """Column-major code puts the row index on x (`i < m` with i from blockIdx.x): the grid along x must
    count m, or at sizes where m > n the last rows are never computed (nor checked)."""
    column_major = inferred("""
        #define IDX2C(i, j, ld) (((j) * (ld)) + (i))
        __global__ void axpby_colmajor(const float* A, float* B, float alpha, float beta, int m, int n) {
            int i = blockIdx.x * blockDim.x + threadIdx.x;
            int j = blockIdx.y * blockDim.y + threadIdx.y;
            if (i < m && j < n) B[IDX2C(i, j, m)] = alpha * A[IDX2C(i, j, m)] + beta * B[IDX2C(i, j, m)];
        }""")
    assert column_major.launch.grid == ("ceil_div(m, block.x)", "ceil_div(n, block.y)")
    row_major = inferred("""
        __global__ void add(const float* a, float* b, int rows, int cols) {
            int c = blockIdx.x * blockDim.x + threadIdx.x, r = blockIdx.y * blockDim.y + threadIdx.y;
            if (r < rows && c < cols) b[r * cols + c] += a[r * cols + c];
        }""")
    assert row_major.launch.grid == ("ceil_div(cols, block.x)", "ceil_div(rows, block.y)")
    # every (i, j) the guard admits is launched, at the verify sizes too
    for sizes in (column_major.sizes, column_major.sizes | column_major.verify_sizes[0]):
        _, launch = resolve(column_major, sizes)
        covered = (launch.grid[0] * launch.block[0], launch.grid[1] * launch.block[1])
        assert covered[0] >= sizes["m"] and covered[1] >= sizes["n"]


@pytest.mark.parametrize("row", ["blockIdx.y", "(int)blockIdx.y"])
def test_rows_numbered_by_blockIdx_y_alone_get_a_block_one_thread_high(row: str):
    """`const int row = blockIdx.y;` (darknet's bias kernels, torch's extension tutorial): every thread of
    a block works on one row, so a taller block would repeat rows and its grid, counted in blocks of 8
    rows, would leave 7 in 8 rows of the output unwritten by the original."""
    spec = inferred(f"""
        __global__ void add_bias(float* out, const float* bias, int rows, int cols) {{
            const int r = {row};
            const int c = blockIdx.x * blockDim.x + threadIdx.x;
            if (r < rows && c < cols) out[r * cols + c] += bias[c];
        }}""")
    assert spec.launch.block == (256, 1)
    assert spec.launch.grid == ("ceil_div(cols, block.x)", "rows")
    for sizes in (spec.sizes, spec.sizes | spec.verify_sizes[0]):
        _, launch = resolve(spec, sizes)
        assert launch.grid[1] * launch.block[1] == sizes["rows"]  # each row once
    # scaled (a tile of rows a block) or with threadIdx.y: blocks several rows high, as before
    tiled = inferred("""
        __global__ void add(const float* a, float* b, int rows, int cols) {
            int c = blockIdx.x * blockDim.x + threadIdx.x, r = blockIdx.y * blockDim.y + threadIdx.y;
            if (r < rows && c < cols) b[r * cols + c] += a[r * cols + c];
        }""")
    assert tiled.launch.block == (32, 8)


def test_a_kernel_whose_threads_each_loop_over_all_n_gets_n_sized_for_its_square():
    """All pairs (nearest neighbours, n-body forces): each of n threads loops over n, so 2^24 elements
    would be 2^48 steps and the original would never finish; n is sized for n² work instead."""
    pairs = inferred("""
        __global__ void nearest(const float* x, const float* y, float* best, int n) {
            int i = blockIdx.x * blockDim.x + threadIdx.x;
            if (i < n) {
                float m = 1e30f;
                for (int j = 0; j < n; j++) {
                    if (j == i) continue;
                    float dx = x[i] - x[j], dy = y[i] - y[j];
                    m = fminf(m, dx * dx + dy * dy);
                }
                best[i] = m;
            }
        }""")
    (verify,) = pairs.verify_sizes
    assert pairs.sizes["n"] ** 2 <= 1 << 28 and verify["n"] ** 2 <= 1 << 24 and verify["n"] % 2 == 1
    assert "n² work" in pairs.inference_note
    # a grid-stride loop also runs to n, but from the thread's own index: n elements in all, as ever
    strided = inferred("""
        __global__ void scale(float* x, float s, int n) {
            for (int i = blockIdx.x * blockDim.x + threadIdx.x; i < n; i += blockDim.x * gridDim.x) x[i] *= s;
        }""")
    assert strided.sizes["n"] == 1 << 24
