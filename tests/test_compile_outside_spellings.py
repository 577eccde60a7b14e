"""Spellings common in public kernel collections that the compile must survive, as a user meets them: the
target's original compiles with the real nvcc (no GPU needed) and so does a candidate of a transform.

Kernels inside namespaces (named, nested, C++17 `a::b`, anonymous, templates): the name expression is the
qualified name. PyTorch extensions whose host wrappers are stamped out by a macro invoked at file scope,
with or without a semicolon: the torch-less device side drops what the macro stamps out on the host.
"""

from __future__ import annotations

from pathlib import Path

import pytest
from cuda_agent.agent.compile_environment import compile_in, environment_for
from cuda_agent.agent.device_source import device_source
from cuda_agent.agent.engine import Engine, EngineSettings
from cuda_agent.agent.proposers.launch_config import propose_launch_configs
from cuda_agent.agent.proposers.transforms.restrict import propose_restrict
from cuda_agent.agent.targets import KernelTarget, load_targets
from cuda_agent.sandbox.compile import compile_kernel
from cuda_agent.sandbox.nvcc import find_nvcc
from cuda_agent.sandbox.nvrtc import nvrtc_unavailable_reason
from cuda_agent.sandbox.reports import CompileResult

needs_nvcc = pytest.mark.skipif(find_nvcc() is None, reason="nvcc is not installed")
needs_nvrtc = pytest.mark.skipif(nvrtc_unavailable_reason() is not None, reason="NVRTC is not installed")

# A 1-D element-wise kernel (its spec is inferred), whose inputs are not yet `const __restrict__`: the
# restrict transform has a candidate for it.
BLEND = """\
__global__ void blend(float* first, float* second, float* mixed, int length)
{
    int at = blockIdx.x * blockDim.x + threadIdx.x;
    if (at < length) mixed[at] = 0.25f * first[at] + 0.75f * second[at];
}
"""


def targets_of(tmp_path: Path, source: str, name: str = "kernel.cu") -> list[KernelTarget]:
    path = tmp_path / name
    path.write_text(source)
    return [target for target in load_targets(path, source).targets if target.spec is not None]


def the_target(tmp_path: Path, source: str, kernel: str) -> KernelTarget:
    found = [target for target in targets_of(tmp_path, source) if target.kernel.name == kernel]
    assert len(found) == 1, [target.kernel.name for target in targets_of(tmp_path, source)]
    return found[0]


def messages(result: CompileResult) -> list[str]:
    return [f"{d.line}:{d.column} {d.message}" for d in result.diagnostics]


def assert_original_and_candidates_compile(target: KernelTarget) -> None:
    """The original as the engine compiles it, then each candidate of the restrict transform (one or more)."""
    candidates = propose_restrict(target)
    assert candidates, f"no restrict candidate for {target.kernel.name}"
    with Engine(EngineSettings(use_cache=False)) as engine:
        original = engine.compile(target, target.source)
        assert original.ok, messages(original)
        for candidate in candidates:
            result = engine.compile(target, candidate.source, candidate)
            assert result.ok, (candidate.description, messages(result))


# -- kernels in namespaces -------------------------------------------------------------------------------


@needs_nvcc
def test_a_kernel_in_a_namespace_compiles_as_do_its_candidates(tmp_path: Path) -> None:
    target = the_target(tmp_path, f"namespace mix {{\n{BLEND}}}  // namespace mix\n", "blend")
    assert target.name_expression == "mix::blend"
    assert_original_and_candidates_compile(target)


@needs_nvcc
@pytest.mark.parametrize(
    ("opening", "closing", "qualified"),
    [
        ("namespace outer { namespace inner {", "} }", "outer::inner::blend"),
        ("namespace outer::inner {", "}", "outer::inner::blend"),
        ("namespace outer { inline namespace v2 {", "} }", "outer::v2::blend"),
        ("namespace {", "}", "blend"),  # an anonymous namespace's names are visible in its file
        ("namespace outer { namespace {", "} }", "outer::blend"),
        ("namespace { namespace inner {", "} }", "inner::blend"),
    ],
)
def test_nested_and_anonymous_namespaces(tmp_path: Path, opening: str, closing: str, qualified: str) -> None:
    target = the_target(tmp_path, f"{opening}\n{BLEND}{closing}\n", "blend")
    assert target.name_expression == qualified
    with Engine(EngineSettings(use_cache=False)) as engine:
        result = engine.compile(target, target.source)
    assert result.ok, messages(result)


@needs_nvcc
def test_kernels_of_one_name_in_two_namespaces_are_compiled_each_as_itself(tmp_path: Path) -> None:
    source = f"namespace left {{\n{BLEND}}}\nnamespace right {{\n{BLEND.replace('0.25f', '0.5f')}}}\n"
    targets = targets_of(tmp_path, source)
    assert [target.name_expression for target in targets] == ["left::blend", "right::blend"]
    with Engine(EngineSettings(use_cache=False)) as engine:
        results = [engine.compile(target, source) for target in targets]
    assert all(result.ok for result in results), [messages(result) for result in results]
    symbols = {result.kernel.lowered_name for result in results if result.kernel is not None}
    assert len(symbols) == 2 and all("left" in s or "right" in s for s in symbols), symbols


# A template whose second argument follows the launch's block; its spec names it as its own namespace does
# (`{written}`), with or without the namespace.
TILED_SCALE = """\
namespace tiles {{
/* cuda-agent
instantiate = "{written}<float, block.x>"
[sizes]
length = 65536
[args]
values = {{ role = "inout", dtype = "float32", shape = ["length"] }}
length = {{ value = "length" }}
[launch]
block = [256]
grid = ["ceil_div(length, block.x)"]
*/
template <typename Element, int WIDTH>
__global__ void __launch_bounds__(WIDTH) tiled_scale(Element* values, int length)
{{
    __shared__ Element staged[WIDTH];
    int at = blockIdx.x * WIDTH + threadIdx.x;
    staged[threadIdx.x] = at < length ? values[at] : Element(0);
    __syncthreads();
    if (at < length) values[at] = Element(3) * staged[threadIdx.x];
}}
}}  // namespace tiles
"""


@needs_nvcc
@pytest.mark.parametrize("written", ["tiled_scale", "tiles::tiled_scale"])
def test_a_template_in_a_namespace_compiles_at_each_tuned_block(tmp_path: Path, written: str) -> None:
    target = the_target(tmp_path, TILED_SCALE.format(written=written), "tiled_scale")
    assert target.name_expression == "tiles::tiled_scale<float, 256>"
    tuned = [c for c in propose_launch_configs(target) if c.block == (128,)]
    assert len(tuned) == 1
    assert target.name_expression_at(tuned[0].block, tuned[0].source) == "tiles::tiled_scale<float, 128>"
    with Engine(EngineSettings(use_cache=False)) as engine:
        original = engine.compile(target, target.source)
        candidate = engine.compile(target, tuned[0].source, tuned[0])
    assert original.ok, messages(original)
    assert candidate.ok, messages(candidate)


# -- host code stamped out by macros in PyTorch extensions -----------------------------------------------

EXTENSION_HEAD = """\
#include <torch/extension.h>
#include <cuda_runtime.h>

""" + BLEND.replace("blend", "blend_f32")

# Host wrappers stamped out by a macro: they take torch::Tensor, incomplete without torch's headers.
STAMP_WRAPPER = """
#define STAMP_BLEND_WRAPPER(suffix)                                             \\
    torch::Tensor blend_##suffix(torch::Tensor first, torch::Tensor second)     \\
    {                                                                           \\
        auto mixed = torch::empty_like(first);                                  \\
        const int length = first.numel();                                       \\
        blend_f32<<<(length + 127) / 128, 128>>>(first.data_ptr<float>(),       \\
            second.data_ptr<float>(), mixed.data_ptr<float>(), length);         \\
        return mixed;                                                           \\
    }
"""

PYBIND_BLOCK = """
PYBIND11_MODULE(TORCH_EXTENSION_NAME, module)
{
    module.def("blend", &blend_host, "blend (CUDA)");
}
"""

TORCH_LIBRARY_BLOCK = """
TORCH_LIBRARY(blending, library)
{
    library.def("blend", &blend_host);
}
"""

INVOCATIONS = {
    "without a semicolon": "STAMP_BLEND_WRAPPER(host)\n",
    "with a semicolon": "STAMP_BLEND_WRAPPER(host);\n",
    "several without semicolons": (
        "STAMP_BLEND_WRAPPER(host)\nSTAMP_BLEND_WRAPPER(again)\nSTAMP_BLEND_WRAPPER(more)\n"
    ),
    "several with semicolons": "STAMP_BLEND_WRAPPER(host);\nSTAMP_BLEND_WRAPPER(again);\n",
}


def extension(tmp_path: Path, invocations: str, bindings: str = PYBIND_BLOCK) -> KernelTarget:
    return the_target(tmp_path, EXTENSION_HEAD + STAMP_WRAPPER + "\n" + invocations + bindings, "blend_f32")


@needs_nvcc
def test_an_extension_whose_wrappers_a_macro_stamps_out_compiles_as_do_its_candidates(tmp_path: Path) -> None:
    target = extension(tmp_path, INVOCATIONS["without a semicolon"])
    assert_original_and_candidates_compile(target)


@needs_nvcc
@pytest.mark.parametrize("spelling", sorted(INVOCATIONS))
@pytest.mark.parametrize("bindings", [PYBIND_BLOCK, TORCH_LIBRARY_BLOCK], ids=["pybind11", "torch_library"])
def test_each_spelling_of_the_invocations_compiles(tmp_path: Path, spelling: str, bindings: str) -> None:
    target = extension(tmp_path, INVOCATIONS[spelling], bindings)
    result = compile_in(
        environment_for(target.path), target.source, target.name_expression, filename=str(target.path),
        arch="sm_90",
    )  # fmt: skip
    assert result.ok, messages(result)


def test_the_device_side_keeps_the_macro_and_every_line_and_byte_column() -> None:
    source = EXTENSION_HEAD + STAMP_WRAPPER + "\n" + INVOCATIONS["several without semicolons"] + PYBIND_BLOCK
    device = device_source(source, without_torch=True)
    assert len(device.encode()) == len(source.encode())
    assert [len(line) for line in device.splitlines()] == [len(line) for line in source.splitlines()]
    assert "#define STAMP_BLEND_WRAPPER(suffix)" in device and "STAMP_BLEND_WRAPPER(more)" in device
    assert "torch::Tensor" not in device and "numel" not in device and "PYBIND11_MODULE" not in device
    # The continuations stay, so the definition still ends where it did.
    assert device.count("\\\n") == source.count("\\\n")


# One macro stamps out a device helper, a kernel and its host wrapper; a kernel written out calls the helper.
STAMP_OPERATION = """\
#include <torch/extension.h>

#define STAMP_OPERATION(name, formula)                                          \\
    __device__ __forceinline__ float name##_of(float v) { return formula; }     \\
    __global__ void name##_each(const float* source, float* target, int total)  \\
    {                                                                           \\
        int at = blockIdx.x * blockDim.x + threadIdx.x;                         \\
        if (at < total) target[at] = name##_of(source[at]);                     \\
    }                                                                           \\
    torch::Tensor name(torch::Tensor source)                                    \\
    {                                                                           \\
        auto target = torch::empty_like(source);                                \\
        const int total = source.numel();                                       \\
        name##_each<<<(total + 255) / 256, 256>>>(                              \\
            source.data_ptr<float>(), target.data_ptr<float>(), total);         \\
        return target;                                                          \\
    }

STAMP_OPERATION(clip_low, v < -1.0f ? -1.0f : v)
STAMP_OPERATION(cube, v * v * v)

__global__ void cube_of_clipped(float* source, float* target, int total)
{
    int at = blockIdx.x * blockDim.x + threadIdx.x;
    if (at < total) target[at] = cube_of(clip_low_of(source[at]));
}

torch::Tensor cube_clipped(torch::Tensor source)
{
    auto target = torch::empty_like(source);
    cube_of_clipped<<<(source.numel() + 255) / 256, 256>>>(
        source.data_ptr<float>(), target.data_ptr<float>(), source.numel());
    return target;
}

PYBIND11_MODULE(TORCH_EXTENSION_NAME, module) { module.def("cube_clipped", &cube_clipped); }
"""


@needs_nvcc
def test_a_macro_that_stamps_out_device_code_and_a_wrapper_keeps_the_device_code(tmp_path: Path) -> None:
    target = the_target(tmp_path, STAMP_OPERATION, "cube_of_clipped")
    assert_original_and_candidates_compile(target)  # it calls the helpers the macro stamps out
    environment = environment_for(target.path)
    for stamped in ("clip_low_each", "cube_each"):  # the macro's own kernels, though no target reads them
        result = compile_in(environment, STAMP_OPERATION, stamped, filename=str(target.path), arch="sm_90")
        assert result.ok, (stamped, messages(result))


@needs_nvcc
def test_device_code_right_after_an_invocation_without_a_semicolon_stays(tmp_path: Path) -> None:
    """tree-sitter reads `STAMP(x)` then `__device__ float f()` as `STAMP(x) __device__` (a qualifier) and a
    host-looking `float f()`: the helper must stay for the kernel that calls it."""
    helper = "__device__ float doubled(float v) { return 2.0f * v; }\n"
    kernel = BLEND.replace("0.25f * first[at]", "doubled(first[at])").replace("blend", "blend_doubled")
    source = EXTENSION_HEAD + STAMP_WRAPPER + "STAMP_BLEND_WRAPPER(host)\n" + helper + kernel + PYBIND_BLOCK
    target = the_target(tmp_path, source, "blend_doubled")
    result = compile_in(environment_for(target.path), source, "blend_doubled", filename=str(target.path),
                        arch="sm_90")  # fmt: skip
    assert result.ok, messages(result)


# -- the same macros outside PyTorch -------------------------------------------------------------------------

# A host launcher stamped out by a macro, with host-only calls NVRTC cannot compile.
STAMP_LAUNCHER = (
    BLEND
    + """
#define STAMP_LAUNCHER(suffix)                                                  \\
    void launch_##suffix(float* first, float* second, float* mixed, int length) \\
    {                                                                           \\
        float* scratch = nullptr;                                               \\
        cudaMalloc(&scratch, length * sizeof(float));                           \\
        blend<<<(length + 255) / 256, 256>>>(first, second, mixed, length);     \\
        cudaFree(scratch);                                                      \\
    }

STAMP_LAUNCHER(plain)
STAMP_LAUNCHER(other)
"""
)


@needs_nvrtc
def test_nvrtc_compiles_a_file_whose_host_launchers_a_macro_stamps_out() -> None:
    result = compile_kernel(device_source(STAMP_LAUNCHER), "blend", filename="kernel.cu", backend="nvrtc")
    assert result.ok, messages(result)


@needs_nvcc
def test_a_macro_expanded_inside_a_class_keeps_its_members(tmp_path: Path) -> None:
    """Members stay in the device side (test_device_source.py): so do those a macro stamps out in a class,
    which the class's other members may call."""
    source = """\
#define STAMP_GETTER(field) float field##_value() const { return field; }

struct Weights {
    float near, far;
    STAMP_GETTER(near)
    STAMP_GETTER(far)
    float total() const { return near_value() + far_value(); }
};

__global__ void weigh(const float* first, float* second, Weights weights, int length)
{
    int at = blockIdx.x * blockDim.x + threadIdx.x;
    if (at < length) second[at] = weights.near * first[at] + weights.far * second[at];
}
"""
    device = device_source(source)
    assert device.splitlines()[0] == source.splitlines()[0]
    path = tmp_path / "weights.cu"
    result = compile_in(environment_for(path), source, "weigh", filename=str(path), arch="sm_90")
    assert result.ok, messages(result)


def test_a_macro_that_opens_a_function_it_does_not_close_is_kept() -> None:
    """A fragment of a function is not read as one: nothing is blanked in it (when unsure, keep)."""
    source = (
        "#define BEGIN_HOST(name) void name() { int ready = 0;\n#define END_HOST }\n"
        + BLEND
        + "BEGIN_HOST(setup) ready = 1; END_HOST\n"
    )
    device = device_source(source)
    assert device.splitlines()[0] == source.splitlines()[0]
