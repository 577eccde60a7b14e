"""Kernels of PyTorch extensions that take packed accessors (`torch::PackedTensorAccessor32<scalar_t, 2,
torch::RestrictPtrTraits> x`, indexed `x[n][c]`, sized `x.size(1)`): recognised in the signature, given a
spec with the accessors' shapes, passed by the sandbox as the struct torch builds, verified on the GPU."""

from __future__ import annotations

import shutil
import subprocess
from pathlib import Path

import pytest
from cuda_agent.agent.kernels import find_kernels
from cuda_agent.agent.spec.infer import infer_spec
from cuda_agent.agent.targets import load_targets
from cuda_agent.sandbox.accessors import accessor_struct

# The style of torch's C++/CUDA extension tutorial: a row of blocks per batch row, x along the channels,
# an element-wise helper templated on scalar_t, the launcher dispatching on the dtype.
BIAS_GELU = """\
#include <torch/extension.h>

template <typename scalar_t>
__device__ __forceinline__ scalar_t gelu(scalar_t x) {
    return 0.5 * x * (1.0 + tanh(0.7978845608 * (x + 0.044715 * x * x * x)));
}

template <typename scalar_t>
__global__ void bias_gelu_kernel(
    const torch::PackedTensorAccessor32<scalar_t, 2, torch::RestrictPtrTraits> input,
    const torch::PackedTensorAccessor32<scalar_t, 1, torch::RestrictPtrTraits> bias,
    torch::PackedTensorAccessor32<scalar_t, 2, torch::RestrictPtrTraits> output) {
    const int row = blockIdx.y;
    const int col = blockIdx.x * blockDim.x + threadIdx.x;
    if (col < input.size(1)) {
        output[row][col] = gelu(input[row][col] + bias[col]);
    }
}

torch::Tensor bias_gelu(torch::Tensor input, torch::Tensor bias) {
    auto output = torch::empty_like(input);
    const int threads = 256;
    const dim3 blocks((input.size(1) + threads - 1) / threads, input.size(0));
    AT_DISPATCH_FLOATING_TYPES(input.scalar_type(), "bias_gelu", ([&] {
        bias_gelu_kernel<scalar_t><<<blocks, threads>>>(
            input.packed_accessor32<scalar_t, 2, torch::RestrictPtrTraits>(),
            bias.packed_accessor32<scalar_t, 1, torch::RestrictPtrTraits>(),
            output.packed_accessor32<scalar_t, 2, torch::RestrictPtrTraits>());
    }));
    return output;
}
"""

# A thread per row summing it, 64-bit accessors, the `at::` spelling, an early return.
ROW_SUMS = """\
#include <torch/extension.h>

__global__ void row_sums_kernel(const at::PackedTensorAccessor64<float, 2, at::RestrictPtrTraits> x,
                                at::PackedTensorAccessor64<float, 1, at::RestrictPtrTraits> sums) {
    const int64_t row = blockIdx.x * blockDim.x + threadIdx.x;
    if (row >= x.size(0)) return;
    float s = 0.f;
    for (int64_t j = 0; j < x.size(1); ++j) {
        s += x[row][j];
    }
    sums[row] = s;
}
"""


# A batch a block along z or y, the other axes global, a bound stated into the kernel's own check.
BATCHED = """\
#include <torch/extension.h>

__global__ void add_3d_kernel(const torch::PackedTensorAccessor32<float, 3, torch::RestrictPtrTraits> a,
                              const torch::PackedTensorAccessor32<float, 3, torch::RestrictPtrTraits> b,
                              torch::PackedTensorAccessor32<float, 3, torch::RestrictPtrTraits> out) {
    const int batch = blockIdx.z;
    const int y = blockIdx.y * blockDim.y + threadIdx.y;
    const int x = blockIdx.x * blockDim.x + threadIdx.x;
    if (y < a.size(1) && x < a.size(2)) out[batch][y][x] = a[batch][y][x] + b[batch][y][x];
}

__global__ void channel_means_kernel(const at::PackedTensorAccessor64<float, 3, at::RestrictPtrTraits> x,
                                     at::PackedTensorAccessor64<float, 2, at::RestrictPtrTraits> means) {
    const int n = blockIdx.y;
    const int c = threadIdx.x + blockIdx.x * blockDim.x;
    if (c >= x.size(1)) return;
    float sum = 0.f;
    for (int i = 0; i < x.size(2); ++i) {
        sum += x[n][c][i];
    }
    means[n][c] = sum / x.size(2);
}
"""


def spec_of(source: str, name: str):  # type: ignore[no-untyped-def]
    kernel = next(k for k in find_kernels(source) if k.name == name)
    return infer_spec(kernel, source)


@pytest.mark.parametrize(
    ("declared", "accessor", "element"),
    [
        ("const torch::PackedTensorAccessor32<scalar_t, 2, torch::RestrictPtrTraits> x", (2, 32), "scalar_t"),
        ("at::PackedTensorAccessor64<float, 3, at::RestrictPtrTraits> x", (3, 64), "float"),
        ("torch::PackedTensorAccessor<double, 1> x", (1, 64), "double"),
        (
            "at::GenericPackedTensorAccessor<at::Half, 4, at::DefaultPtrTraits, int32_t> x",
            (4, 32),
            "at::Half",
        ),
        ("PackedTensorAccessor32<float, D, torch::RestrictPtrTraits> x", None, "PackedTensorAccessor32"),
        ("const float* __restrict__ x", None, "float"),
    ],
)
def test_accessor_parameters_are_read_from_the_signature(
    declared: str, accessor: tuple[int, int] | None, element: str
) -> None:
    (kernel,) = find_kernels(f"__global__ void k({declared}) {{}}")
    (parameter,) = kernel.parameters
    found = (parameter.accessor.rank, parameter.accessor.index_bits) if parameter.accessor else None
    assert found == accessor
    assert parameter.type.startswith(element)
    assert parameter.is_buffer == (accessor is not None or parameter.is_pointer)


def test_the_tutorial_style_kernel_gets_the_accessors_shapes_and_a_row_of_blocks_a_row() -> None:
    spec, note = spec_of(BIAS_GELU, "bias_gelu_kernel")
    assert spec is not None, note
    shapes = {a.name: a.shape for a in spec.arguments}
    assert shapes == {
        "input": ("input_size0", "input_size1"),
        "bias": ("input_size1",),  # indexed by the same `col` as the input's columns: one size
        "output": ("input_size0", "input_size1"),
    }
    assert [a.accessor_bits for a in spec.arguments] == [32, 32, 32]
    assert [a.role for a in spec.arguments] == ["input", "input", "output"]
    # `row = blockIdx.y` with no threadIdx.y: one row a block along y, the grid as tall as the rows
    assert spec.launch.block == (256, 1)
    assert spec.launch.grid == ("ceil_div(input_size1, block.x)", "input_size0")
    assert spec.instantiate == "bias_gelu_kernel<float>"
    assert "accessors as pointers" in note


def test_a_loop_over_an_accessors_size_and_64_bit_indices() -> None:
    spec, note = spec_of(ROW_SUMS, "row_sums_kernel")
    assert spec is not None, note
    x, sums = spec.arguments
    assert (x.accessor_bits, sums.accessor_bits) == (64, 64)
    assert x.shape == ("x_size0", "x_size1") and sums.shape == ("x_size0",)  # `row` indexes both
    assert (x.role, sums.role) == ("input", "output")
    assert spec.launch.grid == ("ceil_div(x_size0, block.x)",)
    assert spec.reduction == "x_size1"  # a sum along the row: rewrites may reorder it within tolerance


def test_a_batch_a_block_along_z_or_y_gets_blocks_one_deep_and_a_grid_as_long_as_the_batch() -> None:
    volume, _ = spec_of(BATCHED, "add_3d_kernel")
    assert volume is not None
    assert volume.launch.block == (64, 4, 1)
    assert volume.launch.grid == ("ceil_div(a_size2, block.x)", "ceil_div(a_size1, block.y)", "a_size0")
    assert {a.name: a.shape for a in volume.arguments}["out"] == ("a_size0", "a_size1", "a_size2")
    means, note = spec_of(BATCHED, "channel_means_kernel")
    assert means is not None, note
    assert means.launch.block == (256, 1)
    assert means.launch.grid == ("ceil_div(x_size1, block.x)", "x_size0")
    assert [a.shape for a in means.arguments] == [("x_size0", "x_size1", "x_size2"), ("x_size0", "x_size1")]
    assert means.reduction == "x_size2"
    x_elements = means.sizes["x_size0"] * means.sizes["x_size1"] * means.sizes["x_size2"]
    assert x_elements <= 1 << 25  # sized by the several-sizes caps, not 4096 on every side


def test_accessors_taken_apart_are_refused_with_the_reason() -> None:
    partial = BIAS_GELU.replace(
        "output[row][col] = gelu(input[row][col] + bias[col]);",
        "auto in_row = input[row];\n        output[row][col] = gelu(in_row[col] + bias[col]);",
    )
    spec, note = spec_of(partial, "bias_gelu_kernel")
    assert spec is None
    assert "input[row]: input has 2 dimension(s), indexed with 1" in note


def test_a_written_spec_gives_an_accessor_one_size_a_dimension(tmp_path: Path) -> None:
    spec_comment = """/* cuda-agent
kernel = "bias_gelu_kernel"
instantiate = "bias_gelu_kernel<float>"
[sizes]
rows = 512
cols = 1000
[args]
input = { role = "input", dtype = "float32", shape = ["rows * cols"] }
bias = { role = "input", dtype = "float32", shape = ["cols"] }
output = { role = "output", dtype = "float32", shape = ["rows", "cols"] }
[launch]
block = [256]
grid = ["ceil_div(cols, block.x)", "rows"]
*/
"""
    path = tmp_path / "ext.cu"
    path.write_text(spec_comment + BIAS_GELU)
    loaded = load_targets(path)
    assert loaded.targets[0].spec is None
    messages = [error.message for error in loaded.spec_errors]
    assert any("input is a PackedTensorAccessor32 of 2 dimension(s)" in m for m in messages), messages
    path.write_text(spec_comment.replace('["rows * cols"]', '["rows", "cols"]') + BIAS_GELU)
    (target,) = load_targets(path).targets
    assert target.spec is not None, target.note
    assert [a.accessor_bits for a in target.spec.arguments] == [32, 32, 32]


def test_rewrites_are_made_on_the_pointer_form_and_brought_back_as_a_call_from_the_kernel(
    tmp_path: Path,
) -> None:
    """A thread per row summing it: the warp-per-row rewrite reads pointers; it is made on the kernel's
    pointer form and comes back as a `__device__` function the kernel, its accessors unchanged, calls."""
    from cuda_agent.agent.compile_environment import compile_in, environment_for
    from cuda_agent.agent.optimize import PROPOSERS
    from cuda_agent.agent.proposers.accessor_form import SUFFIX
    from cuda_agent.agent.search import _first_round
    from cuda_agent.sandbox.nvcc import find_nvcc

    path = tmp_path / "row_sums.cu"
    path.write_text(ROW_SUMS)
    (target,) = load_targets(path).targets
    proposers = {name: p for name, p in PROPOSERS.items() if name != "llm"}
    candidates = [c for group in _first_round(target, proposers, []) for c in group]
    warp = next(c for c in candidates if c.description.startswith("one warp per row"))
    # a follow-up built on the rewrite's pointer form, not on the kernel that calls it
    chained = next(
        c
        for c in candidates
        if c.description.startswith("one warp per row") and " + 16-byte" in c.description
    )
    assert "reinterpret_cast<const uint4*>" in chained.source.split(f"row_sums_kernel{SUFFIX}(", 1)[1]
    (kernel,) = [k for k in find_kernels(warp.source) if k.name == "row_sums_kernel"]
    assert [p.accessor is not None for p in kernel.parameters] == [True, True]  # the signature as written
    assert f"row_sums_kernel{SUFFIX}(x.data(), sums.data(), x.size(0), x.size(1));" in warp.source
    assert "__shfl_xor_sync" in warp.source.split(f"row_sums_kernel{SUFFIX}(", 1)[1]  # the rewritten body
    reread = load_targets(path, warp.source).find("row_sums_kernel")
    assert reread is not None and reread.spec is not None  # the spec it was verified with, written above it
    assert reread.spec.launch.grid == ("ceil_div(x_size0, block.x // 32)",)
    assert [a.shape for a in reread.spec.arguments] == [("x_size0", "x_size1"), ("x_size0",)]
    # a launch alone: the kernel as written, the accessor spec with that block written above it
    original_kernel = ROW_SUMS[ROW_SUMS.index("__global__") :]
    for candidate in [c for c in candidates if c.description.startswith("block ")]:
        assert candidate.source.endswith(original_kernel)
        assert "x_size0 = {" not in candidate.source  # no added size as an argument
        reread = load_targets(path, candidate.source).find("row_sums_kernel")
        assert reread is not None and reread.spec is not None
        assert reread.spec.launch.block == candidate.block
    if find_nvcc() is not None:
        result = compile_in(
            environment_for(path), warp.source, "row_sums_kernel", filename=str(path), arch="sm_90"
        )
        assert result.ok, [d.message for d in result.diagnostics]


LAYOUT_PROGRAM = """\
#include <ATen/core/TensorAccessor.h>
#include <cstdint>
#include <cstdio>
#include <cstring>

template <typename Accessor>
void print(const Accessor& a) {
    unsigned char bytes[sizeof(a)];
    std::memcpy(bytes, &a, sizeof(a));
    for (unsigned i = 0; i < sizeof(a); ++i) std::printf("%02x", bytes[i]);
    std::printf("\\n");
}

int main() {
    float* data = reinterpret_cast<float*>(0x1122334455667788ull);
    int32_t sizes1[1] = {5}, strides1[1] = {1};
    int32_t sizes2[2] = {3, 4}, strides2[2] = {4, 1};
    int64_t sizes3[3] = {2, 3, 4}, strides3[3] = {12, 4, 1};
    print(at::PackedTensorAccessor32<float, 1, at::DefaultPtrTraits>(data, sizes1, strides1));
    print(at::PackedTensorAccessor32<float, 2, at::DefaultPtrTraits>(data, sizes2, strides2));
    print(at::PackedTensorAccessor64<float, 3, at::DefaultPtrTraits>(data, sizes3, strides3));
}
"""


def test_the_struct_the_sandbox_passes_is_the_one_torchs_header_builds(tmp_path: Path) -> None:
    torch_extension = pytest.importorskip("torch.utils.cpp_extension")
    compiler = shutil.which("g++")
    if compiler is None:
        pytest.skip("no g++ to build torch's accessor on the host")
    source, program = tmp_path / "layout.cpp", tmp_path / "layout"
    source.write_text(LAYOUT_PROGRAM)
    includes = [f"-I{folder}" for folder in torch_extension.include_paths()]
    subprocess.run([compiler, "-std=c++17", *includes, str(source), "-o", str(program)], check=True)
    torch_bytes = subprocess.run([str(program)], check=True, capture_output=True, text=True).stdout.split()
    ours = [
        accessor_struct(0x1122334455667788, shape, bits).tobytes().hex()
        for shape, bits in (((5,), 32), ((3, 4), 32), ((2, 3, 4), 64))
    ]
    assert ours == torch_bytes


@pytest.mark.gpu
def test_accessor_kernels_run_verify_and_get_faster_rewrites_on_the_gpu(tmp_path: Path) -> None:
    """The originals run on the structs the sandbox builds (every guard intact, agreeing with themselves
    over two input sets) and the first rewrites verify against them."""
    from cuda_agent.agent.engine import Engine, EngineSettings
    from cuda_agent.agent.optimize import PROPOSERS
    from cuda_agent.agent.search import _first_round, interleave

    from tests.test_rewrite_warp_per_output import shown

    proposers = {name: p for name, p in PROPOSERS.items() if name != "llm"}
    path = tmp_path / "ext.cu"
    path.write_text(
        BIAS_GELU
        + ROW_SUMS.replace("#include <torch/extension.h>\n", "")
        + BATCHED.replace("#include <torch/extension.h>\n", "")
    )
    with Engine(EngineSettings(use_cache=False, input_sets=2)) as engine:
        targets = load_targets(path).targets
        assert [t.kernel.name for t in targets if t.spec is not None] == [
            "bias_gelu_kernel",
            "row_sums_kernel",
            "add_3d_kernel",
            "channel_means_kernel",
        ]
        for target in targets:
            baseline = engine.baseline(target)
            assert baseline.usable, (target.kernel.name, baseline.error)
            results = engine.evaluate(baseline, interleave(_first_round(target, proposers, []))[:6])
            seen = shown(baseline.target, results)
            assert results and all(r.verified for r in results), seen


def test_a_written_spec_is_kept_through_the_pointer_form() -> None:
    """The bench's accessor kernel has its spec written: every candidate's file reads back with that spec
    (its launch edited in place where the candidate changed it), never with the pointer form's sizes."""
    from cuda_agent.agent.optimize import PROPOSERS
    from cuda_agent.agent.search import _first_round

    path = Path(__file__).parent.parent / "bench" / "kernels" / "outside" / "row_sums_accessors.cu"
    (target,) = load_targets(path).targets
    assert target.spec is not None and not target.spec.inferred
    notes: list[str] = []
    proposers = {name: p for name, p in PROPOSERS.items() if name != "llm"}
    candidates = [c for group in _first_round(target, proposers, notes) for c in group]
    assert not notes  # no proposer failed on it
    assert any(c.proposer == "grid-stride" for c in candidates)  # edits the written grid
    for candidate in candidates:
        loaded = load_targets(path, candidate.source)
        assert not loaded.spec_errors, (candidate.description, [e.message for e in loaded.spec_errors])
        assert 'x_size0 = { role = "scalar"' not in candidate.source


def test_a_launch_change_on_a_rewrite_brought_back_keeps_its_body() -> None:
    """A later round's block on top of a rewrite of an accessor kernel: the file it edits calls the
    rewrite's `_on_pointers` function, and the candidate must keep that function (it once put the kernel
    as the user wrote it back in place of the call, leaving a call to nothing)."""
    from cuda_agent.agent.compile_environment import compile_in, environment_for
    from cuda_agent.agent.optimize import PROPOSERS
    from cuda_agent.agent.proposers.accessor_form import SUFFIX
    from cuda_agent.agent.search import _candidate_target, _first_round, _propose

    path = Path(__file__).parent.parent / "bench" / "kernels" / "outside" / "lstm_cell_accessors.cu"
    (target,) = load_targets(path).targets
    proposers = {name: p for name, p in PROPOSERS.items() if name != "llm"}
    candidates = [c for group in _first_round(target, proposers, []) for c in group]
    base = next(c for c in candidates if c.proposer == "rewrite:stride-loop")
    base_target = _candidate_target(target, base)
    assert base_target is not None
    notes: list[str] = []
    steps = _propose("launch-config", proposers["launch-config"], base_target, notes)
    assert steps and not notes
    for step in steps:
        assert f"void lstm_cell_forward_kernel{SUFFIX}(" in step.source, step.description
        result = compile_in(
            environment_for(path), step.source, target.name_expression, filename=str(path), arch="sm_90"
        )
        assert result.ok, (step.description, [d.message for d in result.diagnostics])
