"""The generic source transforms on realistic kernels: what each produces, that it compiles (real NVRTC),
that it edits only the lines it must, and that it stays away from kernels where it would be wrong."""

from __future__ import annotations

from pathlib import Path

import pytest
from cuda_agent.agent.candidates import Candidate
from cuda_agent.agent.device_source import device_source
from cuda_agent.agent.proposers.launch_config import propose_launch_configs
from cuda_agent.agent.proposers.transforms import TRANSFORMS
from cuda_agent.agent.proposers.transforms.flags import propose_flags
from cuda_agent.agent.proposers.transforms.grid_stride import coarsened_grid, propose_grid_stride
from cuda_agent.agent.proposers.transforms.launch_bounds import propose_launch_bounds
from cuda_agent.agent.proposers.transforms.restrict import propose_restrict
from cuda_agent.agent.proposers.transforms.unroll import propose_unroll
from cuda_agent.agent.proposers.transforms.vectorize import propose_vectorize
from cuda_agent.agent.targets import KernelTarget, load_targets
from cuda_agent.sandbox.compile import compile_kernel

ROOT = Path(__file__).resolve().parents[1]
FILES = [
    *sorted((ROOT / "examples").glob("*.cu")),
    *sorted((ROOT / "tests" / "kernels").glob("original_*.cu")),
    *sorted((ROOT / "bench" / "kernels").glob("*.cu")),  # the first drafts the optimizer is measured on
]


def target_of(tmp_path: Path, source: str, name: str | None = None) -> KernelTarget:
    path = tmp_path / "kernel.cu"
    path.write_text(source)
    target = load_targets(path, source).find(name)
    assert target is not None and target.spec is not None, target and target.note
    return target


def assert_compiles(target: KernelTarget, candidate: Candidate) -> None:
    result = compile_kernel(
        device_source(candidate.source),
        candidate.kernel_name or target.name_expression,
        filename=str(target.path),
        include_dirs=(str(target.path.parent),),
        flags=candidate.flags,
    )
    assert result.ok, (candidate.description, result.errors, candidate.source)


def changed_lines(old: str, new: str) -> list[tuple[str, str]]:
    """(old, new) line pairs that differ, for edits that keep the number of lines."""
    old_lines, new_lines = old.splitlines(), new.splitlines()
    assert len(old_lines) == len(new_lines)
    return [(a, b) for a, b in zip(old_lines, new_lines, strict=True) if a != b]


SPEC_1D = """\
/* cuda-agent
[sizes]
n = 1_000_000
[args]
{args}
n = {{ role = "scalar", dtype = "int32", value = "n" }}
[launch]
block = [256]
grid = ["ceil_div(n, block.x)"]
*/
"""

SCALE_ADD = (
    SPEC_1D.format(
        args='x = { role = "input", dtype = "float32", shape = ["n"] }\n'
        'y = { role = "input", dtype = "float32", shape = ["n"] }\n'
        'out = { role = "output", dtype = "float32", shape = ["n"] }'
    )
    + """\
// out = 3 x + y
__global__ void scale_add(float *x, const float* y, float* out, int n)
{
    int i = blockIdx.x * blockDim.x + threadIdx.x;  // one element a thread
    if (i < n) {
        float scaled = 3.0f * x[i];  // keep this comment
        out[i] = scaled + y[i];
    }
}
"""
)

# -- restrict ------------------------------------------------------------------------------------------


def test_restrict_marks_every_buffer_and_consts_inputs(tmp_path: Path) -> None:
    target = target_of(tmp_path, SCALE_ADD)
    [candidate] = propose_restrict(target)
    assert changed_lines(target.source, candidate.source) == [
        (
            "__global__ void scale_add(float *x, const float* y, float* out, int n)",
            "__global__ void scale_add(const float *__restrict__ x, const float* __restrict__ y, "
            "float* __restrict__ out, int n)",
        )
    ]
    assert candidate.assumptions == ("x, y and out do not alias (no two point into the same memory)",)
    assert candidate.launch is None and candidate.block == (256,)
    assert_compiles(target, candidate)


def test_restrict_not_applied_when_the_spec_allows_aliasing(tmp_path: Path) -> None:
    source = SCALE_ADD.replace(
        'out = { role = "output", dtype = "float32", shape = ["n"] }',
        'out = { role = "output", dtype = "float32", shape = ["n"], may_alias = "y" }',
    )
    assert propose_restrict(target_of(tmp_path, source)) == []


def test_restrict_needs_two_pointers_and_skips_done_work(tmp_path: Path) -> None:
    single = "__global__ void scale(float* x, int n)\n{\n    int i = blockIdx.x * blockDim.x + threadIdx.x;\n"
    single += "    if (i < n) x[i] *= 2.0f;\n}\n"
    spec = SPEC_1D.format(args='x = { role = "inout", dtype = "float32", shape = ["n"] }')
    assert propose_restrict(target_of(tmp_path, spec + single)) == []
    done = SCALE_ADD.replace("float *x, const float* y, float* out", "const float* __restrict__ x, "
                             "const float* __restrict__ y, float* __restrict__ out")  # fmt: skip
    assert propose_restrict(target_of(tmp_path, done)) == []


@pytest.mark.parametrize(
    ("use", "const"),
    [
        ("float v = (double)x[i] + __ldg(&x[i]);", True),  # values and a read-only address
        ("const float* row = x + i; float v = row[0];", True),
        ("float4 v4 = VEC4(x[i]); float v = v4.x;", False),  # the macro casts the element's address
        ("float* row = x + i; float v = row[0];", False),  # a pointer that is not const
        ("float v = reinterpret_cast<float2*>(x)[i].x;", False),
        ("float v = first_of(x);", False),  # a helper's parameter may not be const
    ],
)
def test_restrict_makes_an_input_const_only_where_every_use_compiles_with_it(
    tmp_path: Path, use: str, const: bool
) -> None:
    source = SCALE_ADD.replace("float scaled = 3.0f * x[i];", use + " float scaled = 3.0f * v;")
    helpers = "#define VEC4(e) (reinterpret_cast<float4*>(&(e))[0])\n"
    helpers += "__device__ float first_of(float* p) { return p[0]; }\n"
    target = target_of(tmp_path, source.replace("// out = 3 x + y", helpers + "// out = 3 x + y"))
    [candidate] = propose_restrict(target)
    assert ("const float *__restrict__ x" in candidate.source) == const
    assert "float *__restrict__ x" in candidate.source
    assert_compiles(target, candidate)


# -- unroll --------------------------------------------------------------------------------------------

UNROLL = """\
#define TAPS 9
/* cuda-agent
[sizes]
n = 100_000
[args]
x = { role = "input", dtype = "float32", shape = ["n + 8"] }
w = { role = "input", dtype = "float32", shape = [9] }
y = { role = "output", dtype = "float32", shape = ["n"] }
n = { role = "scalar", dtype = "int32", value = "n" }
[launch]
block = [256]
grid = ["ceil_div(n, block.x)"]
*/
__global__ void fir(const float* x, const float* w, float* y, int n)
{
    int i = blockIdx.x * blockDim.x + threadIdx.x;
    if (i >= n) return;
    float acc = 0.0f;
    // taps are a compile-time constant
    for (int t = 0; t < TAPS; ++t) acc += w[t] * x[i + t];
    for (int r = 0; r < n % 3; ++r) acc *= 0.5f;   // runtime bound: left alone
#pragma unroll
    for (int t = 0; t < 4; ++t) acc += 1.0f;       // already annotated
    for (int s = 16; s > 0; s >>= 1) acc += s;     // counts down from a constant
    for (int s = n; s > 0; s >>= 1) acc += s;      // starts at a runtime value
    y[i] = acc;
}
"""


def test_unroll_only_loops_with_a_compile_time_bound(tmp_path: Path) -> None:
    target = target_of(tmp_path, UNROLL)
    four, eight = propose_unroll(target)
    assert four.description == "#pragma unroll 4 on 2 loops with a compile-time bound"
    added = [line for line in four.source.splitlines() if line not in target.source.splitlines()]
    assert added == ["    #pragma unroll 4", "    #pragma unroll 4"]
    lines = four.source.splitlines()
    assert lines[lines.index("    for (int t = 0; t < TAPS; ++t) acc += w[t] * x[i + t];") - 1].strip() == (
        "#pragma unroll 4"
    )
    down = "    for (int s = 16; s > 0; s >>= 1) acc += s;     // counts down from a constant"
    assert lines[lines.index(down) - 1].strip() == "#pragma unroll 4"
    assert "#pragma unroll 8" in eight.source
    for candidate in (four, eight):
        assert_compiles(target, candidate)


def test_unroll_template_bound(tmp_path: Path) -> None:
    source = """\
/* cuda-agent
instantiate = "sum_items<4>"
[sizes]
n = 4096
[args]
x = { role = "input", dtype = "float32", shape = ["n"] }
y = { role = "output", dtype = "float32", shape = ["ceil_div(n, 4)"] }
n = { role = "scalar", dtype = "int32", value = "n" }
[launch]
block = [128]
grid = ["ceil_div(n, 4 * block.x)"]
*/
template <int ITEMS>
__global__ void sum_items(const float* x, float* y, int n)
{
    int i = blockIdx.x * blockDim.x + threadIdx.x;
    float acc = 0.0f;
    for (int k = 0; k < ITEMS; ++k)
        if (i * ITEMS + k < n) acc += x[i * ITEMS + k];
    if (i * ITEMS < n) y[i] = acc;
}
"""
    target = target_of(tmp_path, source)
    candidates = propose_unroll(target)
    assert len(candidates) == 2
    assert "    #pragma unroll 8\n    for (int k = 0; k < ITEMS; ++k)\n" in candidates[1].source
    assert_compiles(target, candidates[1])


def test_unroll_not_applied_to_runtime_loops(tmp_path: Path) -> None:
    softmax = load_targets(ROOT / "examples" / "softmax.cu").find("softmax")
    assert softmax is not None and propose_unroll(softmax) == []
    row_sum = load_targets(ROOT / "tests" / "kernels" / "original_row_sum.cu").find("row_sum")
    assert row_sum is not None and propose_unroll(row_sum) == []  # `stride = blockDim.x / 2; stride > 0`


# -- launch bounds -------------------------------------------------------------------------------------


def test_launch_bounds_added_to_match_the_block(tmp_path: Path) -> None:
    target = target_of(tmp_path, SCALE_ADD)
    plain, occupancy = propose_launch_bounds(target)
    assert changed_lines(target.source, plain.source) == [
        (
            "__global__ void scale_add(float *x, const float* y, float* out, int n)",
            "__global__ void __launch_bounds__(256) scale_add(float *x, const float* y, float* out, int n)",
        )
    ]
    assert "__launch_bounds__(256, 8) scale_add" in occupancy.source
    for candidate in (plain, occupancy):
        assert_compiles(target, candidate)


def test_launch_bounds_adjusted_and_following_a_launch_config(tmp_path: Path) -> None:
    source = SCALE_ADD.replace(
        "__global__ void scale_add", "__global__ void __launch_bounds__(1024) scale_add"
    )
    target = target_of(tmp_path, source)
    [tuned] = [c for c in propose_launch_configs(target) if c.block == (128,)]
    retuned = load_targets(target.path, tuned.source).find("scale_add")
    assert retuned is not None
    plain = propose_launch_bounds(retuned)[0]
    assert changed_lines(source, plain.source) == [
        ("block = [256]", "block = [128]"),
        (
            "__global__ void __launch_bounds__(1024) scale_add(float *x, const float* y, float* out, int n)",
            "__global__ void __launch_bounds__(128) scale_add(float *x, const float* y, float* out, int n)",
        ),
    ]
    assert_compiles(retuned, plain)
    matching = target_of(
        tmp_path, SCALE_ADD.replace("void scale_add", "void __launch_bounds__(256) scale_add")
    )
    assert [c.description.split(":")[0] for c in propose_launch_bounds(matching)] == [
        "__launch_bounds__(256, 8)"
    ]


# -- grid-stride ---------------------------------------------------------------------------------------


def test_grid_stride_loop_keeps_the_body_and_caps_the_grid(tmp_path: Path) -> None:
    target = target_of(tmp_path, SCALE_ADD)
    capped, two, four = propose_grid_stride(target)
    old, new = target.source.splitlines(), capped.source.splitlines()
    assert [line for line in old if line not in new] == [
        'grid = ["ceil_div(n, block.x)"]',
        "    int i = blockIdx.x * blockDim.x + threadIdx.x;  // one element a thread",
        "    if (i < n) {",
    ]
    assert [line for line in new if line not in old] == [
        'grid = ["min(ceil_div(n, block.x), 132 * 8)"]',
        "    for (int i = blockIdx.x * blockDim.x + threadIdx.x; i < n; i += blockDim.x * gridDim.x) {",
    ]
    assert capped.launch is not None and capped.launch.grid == ("min(ceil_div(n, block.x), 132 * 8)",)
    assert two.launch is not None and two.launch.grid == ("ceil_div(n, 2 * block.x)",)
    assert four.launch is not None and four.launch.grid == ("ceil_div(n, 4 * block.x)",)
    assert "float scaled = 3.0f * x[i];  // keep this comment" in capped.source
    # The file re-read runs the launch the candidate was verified with.
    again = load_targets(target.path, four.source).find("scale_add")
    assert again is not None and again.spec is not None and again.spec.launch == four.launch
    for candidate in (capped, two, four):
        assert_compiles(target, candidate)


def test_grid_stride_early_return_form_reindents_the_rest() -> None:
    target = load_targets(ROOT / "examples" / "softmax.cu").find("softmax")
    assert target is not None
    capped = propose_grid_stride(target)[0]
    assert (
        "    for (int row = blockIdx.x * blockDim.x + threadIdx.x; row < rows; "
        "row += blockDim.x * gridDim.x) {\n"
        "        const float* in = x + (size_t)row * cols;\n"
    ) in capped.source
    assert (
        "        for (int c = 0; c < cols; ++c) out[c] = expf(in[c] - peak) / total;\n    }\n}"
        in capped.source
    )
    assert "if (row >= rows) return;" not in capped.source
    assert_compiles(target, capped)


@pytest.mark.parametrize(
    "body",
    [
        "    if (i < n) { __shared__ float s[256]; s[threadIdx.x] = x[i]; __syncthreads(); out[i] = s[0]; }",
        "    if (i < n) out[i] = x[i] + threadIdx.x;",  # depends on which thread runs it
        "    if (i < n) { out[i] = x[i]; i += 1; }",  # changes the index
        "    if (i < n) out[i] = x[i];\n    else out[0] = 0.0f;",
        "    if (i < n) out[i] = x[i];\n    out[0] = y[0];",  # work after the guard
    ],
)
def test_grid_stride_and_vectorize_leave_other_shapes_alone(tmp_path: Path, body: str) -> None:
    head = SCALE_ADD.split("{\n    int i")[0]
    source = head + "{\n    int i = blockIdx.x * blockDim.x + threadIdx.x;\n" + body + "\n}\n"
    target = target_of(tmp_path, source)
    assert propose_grid_stride(target) == []
    assert propose_vectorize(target) == []


def test_grid_stride_not_applied_to_2d_kernels() -> None:
    target = load_targets(ROOT / "examples" / "transpose.cu").find("transpose")
    assert target is not None
    assert propose_grid_stride(target) == [] and propose_vectorize(target) == []


def test_coarsened_grid() -> None:
    assert coarsened_grid("ceil_div(n, block.x)", 4) == "ceil_div(n, 4 * block.x)"
    assert coarsened_grid("ceil_div(rows * cols, block.x)", 2) == "ceil_div(rows * cols, 2 * block.x)"
    assert coarsened_grid("rows", 2) == "ceil_div(rows, 2)"


# -- vectorize -----------------------------------------------------------------------------------------


def test_vectorize_float4_with_aligned_path_and_scalar_tail(tmp_path: Path) -> None:
    target = target_of(tmp_path, SCALE_ADD)
    [candidate] = propose_vectorize(target)
    assert candidate.description == "float4 loads and stores (4 elements a thread), scalar tail"
    assert candidate.launch is not None and candidate.launch.grid == ("ceil_div(n, 4 * block.x)",)
    body = candidate.source.split("int n)\n{\n")[1]
    # The user's comments stay: on their line, with the first lane, and in the tail.
    assert body == (
        "    int i = (blockIdx.x * blockDim.x + threadIdx.x) * 4;  // one element a thread\n"
        "    // 4 elements a thread; float4 access when every buffer is aligned for it\n"
        "    bool aligned = (((unsigned long long)x | (unsigned long long)y | "
        "(unsigned long long)out) & 15) == 0;\n"
        "    if (aligned && i + 4 <= n) {\n"
        "        float4 x4 = *reinterpret_cast<const float4*>(x + i);\n"
        "        float4 y4 = *reinterpret_cast<const float4*>(y + i);\n"
        "        float4 out4;\n"
        "        {\n"
        "            float scaled = 3.0f * x4.x;  // keep this comment\n"
        "            out4.x = scaled + y4.x;\n"
        "        }\n"
        "        {\n"
        "            float scaled = 3.0f * x4.y;\n"
        "            out4.y = scaled + y4.y;\n"
        "        }\n"
        "        {\n"
        "            float scaled = 3.0f * x4.z;\n"
        "            out4.z = scaled + y4.z;\n"
        "        }\n"
        "        {\n"
        "            float scaled = 3.0f * x4.w;\n"
        "            out4.w = scaled + y4.w;\n"
        "        }\n"
        "        *reinterpret_cast<float4*>(out + i) = out4;\n"
        "    } else {  // the last elements, or buffers not aligned for float4\n"
        "        for (int k = i; k < n && k < i + 4; ++k) {\n"
        "            float scaled = 3.0f * x[k];  // keep this comment\n"
        "            out[k] = scaled + y[k];\n"
        "        }\n"
        "    }\n"
        "}\n"
    )
    assert_compiles(target, candidate)


def test_vectorize_loads_read_modify_write_buffers_and_uses_the_index() -> None:
    target = load_targets(ROOT / "examples" / "elementwise.cu").find("saxpy")
    assert target is not None
    [candidate] = propose_vectorize(target)
    assert "float4 y4 = *reinterpret_cast<const float4*>(y + i);" in candidate.source
    assert "y4.w = a * x4.w + y4.w;" in candidate.source
    assert 'grid = ["ceil_div(n, 4 * block.x)"]' in candidate.source
    assert_compiles(target, candidate)


def test_vectorize_other_uses_of_the_index_get_the_lane_offset(tmp_path: Path) -> None:
    source = SPEC_1D.format(args='y = { role = "output", dtype = "float32", shape = ["n"] }') + (
        "__global__ void ramp(float* y, int n)\n{\n"
        "    int i = threadIdx.x + blockIdx.x * blockDim.x;\n"
        "    if (i < n) y[i] = 0.5f * i;\n}\n"
    )
    target = target_of(tmp_path, source)
    [candidate] = propose_vectorize(target)
    assert "y4.x = 0.5f * i;\n        y4.y = 0.5f * (i + 1);" in candidate.source
    assert "y[k] = 0.5f * k;" in candidate.source
    assert_compiles(target, candidate)


@pytest.mark.parametrize("otherwise", ["} else {\n            dx[i] = 0.0f;\n        }", "}"])
def test_vectorize_loads_an_output_stored_under_a_condition_only_where_a_lane_may_keep_it(
    tmp_path: Path, otherwise: str
) -> None:
    """ReLU's backward pass as an if/else stores every lane: its output is not read first. Without the
    else a lane may keep what it held, so the vector path loads it to store it back."""
    source = SPEC_1D.format(
        args='dx = { role = "output", dtype = "float32", shape = ["n"] }\n'
        'x = { role = "input", dtype = "float32", shape = ["n"] }\n'
        'dy = { role = "input", dtype = "float32", shape = ["n"] }'
    ) + (
        "__global__ void relu_backward(float* dx, const float* x, const float* dy, int n)\n{\n"
        "    int i = blockIdx.x * blockDim.x + threadIdx.x;\n"
        "    if (i < n) {\n        if (x[i] > 0.0f) {\n            dx[i] = dy[i];\n        "
        + otherwise
        + "\n    }\n}\n"
    )
    target = target_of(tmp_path, source)
    [candidate] = propose_vectorize(target)
    loaded = "float4 dx4 = *reinterpret_cast<const float4*>(dx + i);" in candidate.source
    assert loaded == (otherwise == "}"), candidate.source
    assert_compiles(target, candidate)


def test_vectorize_half_uses_half2(tmp_path: Path) -> None:
    source = "#include <cuda_fp16.h>\n" + SPEC_1D.format(
        args='x = { role = "input", dtype = "float16", shape = ["n"] }\n'
        'y = { role = "output", dtype = "float16", shape = ["n"] }'
    ) + (
        "__global__ void half_relu(const __half* x, __half* y, int n)\n{\n"
        "    int i = blockIdx.x * blockDim.x + threadIdx.x;\n"
        "    if (i < n) y[i] = __hgt(x[i], __float2half(0.0f)) ? x[i] : __float2half(0.0f);\n}\n"
    )  # fmt: skip
    target = target_of(tmp_path, source)
    [candidate] = propose_vectorize(target)
    assert candidate.description.startswith("__half2 loads and stores (2 elements a thread)")
    assert "& 3) == 0;" in candidate.source and "y2.y = __hgt(x2.y" in candidate.source
    assert_compiles(target, candidate)


@pytest.mark.parametrize(
    "body",
    [
        "    if (i < n) out[i] = x[i + 1] + y[i];",  # neighbour access
        "    if (i < n) out[i] = x[n - 1 - i] + y[i];",  # reversed
        "    if (i < n) out[i] = *(x + i) + y[i];",  # pointer arithmetic
        "    if (i < n) out[i]++;",
    ],
)
def test_vectorize_needs_every_access_at_the_index(tmp_path: Path, body: str) -> None:
    head = SCALE_ADD.split("{\n    int i")[0]
    source = head + "{\n    int i = blockIdx.x * blockDim.x + threadIdx.x;\n" + body + "\n}\n"
    assert propose_vectorize(target_of(tmp_path, source)) == []


def test_vectorize_needs_one_element_type(tmp_path: Path) -> None:
    source = SPEC_1D.format(
        args='x = { role = "input", dtype = "int32", shape = ["n"] }\n'
        'y = { role = "output", dtype = "float32", shape = ["n"] }'
    ) + (
        "__global__ void to_float(const int* x, float* y, int n)\n{\n"
        "    int i = blockIdx.x * blockDim.x + threadIdx.x;\n    if (i < n) y[i] = (float)x[i];\n}\n"
    )
    assert propose_vectorize(target_of(tmp_path, source)) == []


def test_vectorize_writes_out_an_inferred_spec_as_inferred_from_the_original() -> None:
    target = load_targets(ROOT / "examples" / "elementwise.cu").find("relu")
    assert target is not None and target.spec is not None and target.spec.inferred
    [candidate] = propose_vectorize(target)
    again = load_targets(target.path, candidate.source).find("relu")
    assert again is not None and again.spec is not None and not again.spec.inferred
    assert again.spec.launch == candidate.launch
    assert [a.role for a in again.spec.arguments] == [a.role for a in target.spec.arguments]


# -- flags ---------------------------------------------------------------------------------------------


def test_fast_math_where_the_tolerance_allows() -> None:
    target = load_targets(ROOT / "examples" / "softmax.cu").find("softmax")
    assert target is not None
    [candidate] = propose_flags(target)
    assert candidate.flags == ("--use_fast_math",)
    # Applied, the file says how it was compiled (its spec's flags), and the note says the user's own build
    # must pass the flag too.
    applied = load_targets(target.path, candidate.source).find("softmax")
    assert applied is not None and applied.spec is not None and applied.spec.flags == ("--use_fast_math",)
    assert applied.spec.launch == target.spec.launch and applied.spec.oracle == target.spec.oracle
    assert "add it to your own build" in candidate.notes[0]
    assert candidate.assumptions[0].startswith("fast-math: results may differ in the last bits")
    assert_compiles(target, candidate)
    strict = target.source.replace(
        "tolerance = { atol = 1e-6, rtol = 1e-4 }", "tolerance = { atol = 1e-7, rtol = 1e-6 }"
    )
    strict_target = load_targets(target.path, strict).find("softmax")
    assert strict_target is not None and propose_flags(strict_target) == []


def test_fast_math_not_for_kernels_without_approximated_math() -> None:
    target = load_targets(ROOT / "examples" / "elementwise.cu").find("saxpy")
    assert target is not None and propose_flags(target) == []


def test_fast_math_for_half_outputs_whose_math_is_widened_to_float() -> None:
    """A bf16 GELU backward computes in float (tanhf, coshf): fast math applies within bf16's tolerance."""
    path = ROOT / "bench" / "kernels" / "holdout" / "gelu_backward_bf16.cu"
    (target,) = load_targets(path).targets
    [candidate] = propose_flags(target)
    assert candidate.flags == ("--use_fast_math",)
    assert_compiles(target, candidate)
    only_cosh = target.source.replace("tanhf(tanh_arg)", "0.0f")
    (target,) = load_targets(path, only_cosh).targets
    assert len(propose_flags(target)) == 1  # coshf alone is approximated too


# -- every transform on every example ------------------------------------------------------------------


@pytest.mark.parametrize("path", FILES, ids=lambda p: p.name)
def test_every_transform_on_the_examples_compiles_and_round_trips(path: Path) -> None:
    for target in load_targets(path).targets:
        if target.spec is None:
            continue
        for name, propose in TRANSFORMS.items():
            for candidate in propose(target):
                assert candidate.proposer == name
                assert_compiles(target, candidate)
                again = load_targets(path, candidate.source).find(target.kernel.name)
                assert again is not None and again.spec is not None, (name, candidate.description)
                if candidate.launch is not None:
                    assert again.spec.launch == candidate.launch
                # Everything before the kernel's spec and the kernel itself stays as written.
                assert candidate.source.splitlines()[0] == target.source.splitlines()[0]
