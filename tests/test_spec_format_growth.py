"""What real programs needed from the spec format: constant fills (`init = { fill = "-inf" }`), scalars and
template arguments that follow the launch's block (`value = "block.x"`, `instantiate = "k<block.x>"`),
per-spec compiler settings (`flags`, `include_dirs`), and sizes of 0 in shapes.

Each is checked as a user meets it: the spec parses (or the error sits on the token), the problem and launch
the sandbox is given hold the values, the launch tuner's candidates carry them, and the rendered spec reads
back the same. The GPU tests at the end run the kernels through the engine.
"""

from __future__ import annotations

import math
import sys
import types
from collections.abc import Iterator
from dataclasses import replace
from pathlib import Path

import numpy as np
import pytest
from cuda_agent.agent.engine import Baseline, Engine, EngineSettings
from cuda_agent.agent.kernels import find_kernels
from cuda_agent.agent.proposers.launch_config import block_template_argument, propose_launch_configs
from cuda_agent.agent.spec import KernelSpec, SpecError, parse_specs, render_spec, resolve
from cuda_agent.agent.spec.resolve import instantiation
from cuda_agent.agent.targets import KernelTarget, load_targets, problems_for
from cuda_agent.sandbox.checks import float32_to_bfloat16_bits
from cuda_agent.sandbox.plan import ArgumentPlan, Distribution, LaunchPlan, LaunchScalar, Problem
from cuda_agent.sandbox.reports import CompileResult

# A row reduction as people write it: the block size is a template argument (its __launch_bounds__ and the
# tree reduction) and a parameter (the loop's stride); the running maximum starts at -inf, the sum at 0.5.
ROW_STATS = """\
/* cuda-agent
instantiate = "row_stats<block.x>"
[sizes]
rows = 512
cols = 3000
[args]
x = { role = "input", dtype = "float32", shape = ["rows", "cols"], init = { low = -2, high = -1 } }
m = { role = "inout", dtype = "float32", shape = ["rows"], init = { fill = "-inf" } }
s = { role = "inout", dtype = "float32", shape = ["rows"], init = { fill = 0.5 } }
cols_ = { value = "cols" }
block_size = { value = "block.x" }
[launch]
block = [256]
grid = ["rows"]
shared_bytes = "2 * block.x * 4"
[verify]
oracle = { m = "x.amax(dim=1)", s = "0.5 + x.sum(dim=1)" }
reduction = "cols"
*/
template <int BLOCK>
__global__ void __launch_bounds__(BLOCK)
row_stats(const float* x, float* m, float* s, int cols_, int block_size) {
    extern __shared__ float shared[];
    float* maxima = shared;
    float* sums = shared + BLOCK;
    const float* row = x + (size_t)blockIdx.x * cols_;
    float best = m[blockIdx.x];  // the fill: -inf
    float total = 0.0f;
    for (int c = threadIdx.x; c < cols_; c += block_size) {
        best = fmaxf(best, row[c]);
        total += row[c];
    }
    maxima[threadIdx.x] = best;
    sums[threadIdx.x] = total;
    __syncthreads();
    for (int half = BLOCK / 2; half > 0; half /= 2) {
        if (threadIdx.x < half) {
            maxima[threadIdx.x] = fmaxf(maxima[threadIdx.x], maxima[threadIdx.x + half]);
            sums[threadIdx.x] += sums[threadIdx.x + half];
        }
        __syncthreads();
    }
    if (threadIdx.x == 0) {
        m[blockIdx.x] = maxima[0];
        s[blockIdx.x] += sums[0];  // on top of the fill: 0.5
    }
}
"""
# The same kernel with its block written as a number in instantiate.
ROW_STATS_LITERAL = ROW_STATS.replace('"row_stats<block.x>"', '"row_stats<256>"')
# Without the PyTorch oracle: the candidate is compared with the original kernel at the original's block.
ROW_STATS_SELF = ROW_STATS.replace(
    '[verify]\noracle = { m = "x.amax(dim=1)", s = "0.5 + x.sum(dim=1)" }\n', "[verify]\n"
)

SCALE = "__global__ void scale(const float* x, float* y, int n) { }\n"
SCALE_ARGS = """\
x = { role = "input", dtype = "float32", shape = ["n"] }
y = { role = "output", dtype = "float32", shape = ["n"] }
n = { value = "n" }
"""
SCALE_LAUNCH = '[launch]\nblock = [256]\ngrid = ["ceil_div(n, block.x)"]\n'


def parse(source: str) -> tuple[dict[str, KernelSpec], list[SpecError]]:
    return parse_specs(source, find_kernels(source))


def parse_one(source: str) -> KernelSpec:
    specs, errors = parse(source)
    assert errors == [], [e.message for e in errors]
    (spec,) = specs.values()
    return spec


def the_error(source: str) -> SpecError:
    specs, errors = parse(source)
    assert not specs and len(errors) == 1, [e.message for e in errors]
    return errors[0]


def pointed(source: str, error: SpecError) -> str:
    """The text an error's range covers (single-line ranges)."""
    assert error.line == error.end_line
    return source.encode().split(b"\n")[error.line][error.column : error.end_column].decode()


def scale_file(top: str = "", args: str = SCALE_ARGS, rest: str = SCALE_LAUNCH, kernel: str = SCALE) -> str:
    return f"/* cuda-agent\n{top}[sizes]\nn = 1000\n[args]\n{args}{rest}*/\n{kernel}"


def with_arg(entry: str) -> str:
    """SCALE's spec with x's entry replaced (x an inout, so that a fill is read)."""
    return scale_file(
        args=SCALE_ARGS.replace('x = { role = "input", dtype = "float32", shape = ["n"] }', entry),
        kernel=SCALE.replace("const float* x", "float* x"),
    )


def target_of(tmp_path: Path, source: str, name: str = "row_stats.cu") -> KernelTarget:
    path = tmp_path / name
    path.write_text(source)
    files = load_targets(path)
    assert not files.spec_errors, [e.message for e in files.spec_errors]
    (target,) = files.targets
    assert target.spec is not None
    return target


def argument(problem: Problem, name: str) -> ArgumentPlan:
    return next(a for a in problem.arguments if a.name == name)


def reparses(spec: KernelSpec, kernel: str) -> KernelSpec:
    return parse_one(render_spec(spec) + "\n" + kernel)


# -- constant fills --------------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("dtype", "fill", "value"),
    [
        ("float32", '"-inf"', -math.inf),
        ("float32", '"inf"', math.inf),
        ("float32", "-inf", -math.inf),  # TOML's own -inf
        ("float32", "0.5", 0.5),
        ("float32", "-1", -1.0),  # an integer is a fine float
        ("float16", '"-inf"', -math.inf),
        ("bfloat16", "-inf", -math.inf),
        ("float64", '"1 / n"', 1 / 1000),  # a real expression of the sizes
        ("float32", '"-sqrt(n) * 2"', -2 * math.sqrt(1000)),
        ("int32", "-1", -1),
        ("int32", '"n - 1"', 999),
        ("uint8", "255", 255),
        ("int64", '"-(1 << 62)"', -(1 << 62)),
    ],
)
def test_a_fill_resolves_to_the_constant_the_sandbox_writes(dtype: str, fill: str, value: float) -> None:
    c_type = {"float32": "float", "float16": "half", "bfloat16": "__nv_bfloat16", "float64": "double"}
    c_type.update({"int32": "int", "uint8": "unsigned char", "int64": "long long"})
    kernel = SCALE.replace("const float* x", f"{c_type[dtype]}* x")
    source = scale_file(
        args=SCALE_ARGS.replace(
            'x = { role = "input", dtype = "float32", shape = ["n"] }',
            f'x = {{ role = "inout", dtype = "{dtype}", shape = ["n"], init = {{ fill = {fill} }} }}',
        ),
        kernel=kernel,
    )
    spec = parse_one(source)
    problem, _ = resolve(spec)
    distribution = argument(problem, "x").distribution
    assert distribution.kind == "value" and distribution.value == value
    assert isinstance(distribution.value, float) == dtype.startswith(("float", "bfloat"))
    assert reparses(spec, kernel) == spec  # rendered and read back: the same fill


def test_zeros_and_ones_are_still_constant_fills() -> None:
    spec = parse_one(with_arg('x = { role = "inout", dtype = "float32", shape = ["n"], init = "ones" }'))
    assert argument(resolve(spec)[0], "x").distribution == Distribution("value", value=1.0)
    spec = parse_one(with_arg('x = { role = "inout", dtype = "float32", shape = ["n"], init = "zeros" }'))
    assert argument(resolve(spec)[0], "x").distribution == Distribution("value", value=0.0)


def test_a_fill_that_is_not_a_number_points_inside_its_string() -> None:
    source = with_arg('x = { role = "inout", dtype = "float32", shape = ["n"], init = { fill = "abc" } }')
    error = the_error(source)
    assert (error.line, error.column) == (4, 73) and pointed(source, error) == "abc"
    assert error.message == (
        "x.init.fill = \"abc\": unknown size 'abc' (sizes are: n) "
        '(a fill is a number, "inf", "-inf" or an expression of the sizes)'
    )


@pytest.mark.parametrize(
    ("dtype", "c_type", "fill", "message", "text"),
    [
        ("int32", "int", "0.5", "x is int32: its fill must be an integer, not 0.5", "0.5"),
        (
            "int32",
            "int",
            '"-inf"',
            "int32 has no infinity: fill with an integer in [-2147483648, 2147483647]",
            '"-inf"',
        ),
        (
            "int32",
            "int",
            '"n / 2"',
            'x.init.fill = "n / 2": x is int32: its fill is an integer: '
            "use // for integer division or ceil_div(a, b), not /",
            "n / 2",
        ),
        ("uint8", "unsigned char", "256", "the fill of x is 256, outside uint8's range [0, 255]", "256"),
        (
            "float16",
            "half",
            "1e5",
            "x.init.fill = 100000.0 is 100000, beyond float16's largest number (65504): "
            'it would be stored as infinity; write "inf" or "-inf" if that is meant',
            "1e5",
        ),
        (
            "float32",
            "float",
            '"nan"',
            "x.init.fill is NaN: every result computed from it is NaN, which matches NaN whatever the kernel "
            'does, so nothing would be checked; fill with a number, "inf" or "-inf"',
            '"nan"',
        ),
        (
            "float32",
            "float",
            "true",
            'x.init.fill must be a number, "inf", "-inf" or an expression of the sizes, not a boolean (true)',
            "true",
        ),
    ],
)
def test_a_fill_the_dtype_cannot_hold_is_an_error_at_the_value(
    dtype: str, c_type: str, fill: str, message: str, text: str
) -> None:
    kernel = SCALE.replace("const float* x", f"{c_type}* x")
    entry = f'x = {{ role = "inout", dtype = "{dtype}", shape = ["n"], init = {{ fill = {fill} }} }}'
    source = scale_file(args=SCALE_ARGS.replace(SCALE_ARGS.splitlines()[0], entry), kernel=kernel)
    error = the_error(source)
    assert error.message == message
    assert error.line == 4 and pointed(source, error) == text


def test_a_fill_goes_alone_and_never_on_an_output() -> None:
    with_dist = with_arg(
        'x = { role = "inout", dtype = "float32", shape = ["n"], init = { dist = "normal", fill = 1 } }'
    )
    error = the_error(with_dist)
    assert (
        pointed(with_dist, error) == "dist"
        and error.message == "dist does not apply to a constant fill: remove it"
    )
    dist_fill = with_arg('x = { role = "inout", dtype = "float32", shape = ["n"], init = { dist = "fill" } }')
    assert "without dist" in the_error(dist_fill).message
    output = scale_file(
        args=SCALE_ARGS.replace('shape = ["n"] }\nn', 'shape = ["n"], init = { fill = "-inf" } }\nn')
    )
    error = the_error(output)
    assert pointed(output, error) == "fill"
    assert error.message.startswith("y is an output: outputs are not filled but poisoned before every run")
    assert 'role = "inout"' in error.message


def test_a_fill_expression_is_checked_again_at_each_verify_size() -> None:
    entry = 'x = { role = "inout", dtype = "float16", shape = ["n"], init = { fill = "n * 10" } }'
    kernel = SCALE.replace("const float* x", "half* x")
    source = scale_file(
        args=SCALE_ARGS.replace(SCALE_ARGS.splitlines()[0], entry),
        rest=SCALE_LAUNCH + "[verify]\nsizes = [{ n = 7 }, { n = 1000000 }]\n",
        kernel=kernel,
    )
    error = the_error(source)  # 10000 fits float16 at the benchmark; 10 million does not
    assert error.message == (
        'at verify sizes n=1000000: x.init.fill = "n * 10" is 1e+07, beyond float16\'s largest number '
        "(65504): it would be stored as infinity"
    )
    assert pointed(source, error) == "{ n = 1000000 }"


class _NumpyStandIn(types.ModuleType):
    """Just enough of cupy for sandbox/buffers.py's host-side code: its constant fills and scalar
    conversions are array code that numpy runs the same way (the GPU test runs them on the device)."""

    def __init__(self) -> None:
        super().__init__("cupy")
        self.empty = np.empty
        self.uint8 = np.uint8
        self.ndarray = np.ndarray
        errors = types.SimpleNamespace(CUDARuntimeError=RuntimeError, CUDADriverError=RuntimeError)
        self.cuda = types.SimpleNamespace(runtime=errors, driver=errors)


@pytest.fixture
def buffers() -> Iterator[types.ModuleType]:
    """sandbox/buffers.py imported over a numpy stand-in for cupy (where CuPy is installed, the real one)."""
    try:
        import cupy  # noqa: F401
        from cuda_agent.sandbox import buffers as real

        yield real
        return
    except ImportError:
        pass
    import cuda_agent.sandbox as package

    saved = {name: sys.modules.get(name) for name in ("cupy", "cuda_agent.sandbox.buffers")}
    attribute = getattr(package, "buffers", None)
    sys.modules["cupy"] = _NumpyStandIn()
    sys.modules.pop("cuda_agent.sandbox.buffers", None)
    try:
        import cuda_agent.sandbox.buffers as stand_in

        yield stand_in
    finally:  # nothing imported later may see the stand-in
        for name, module in saved.items():
            if module is None:
                sys.modules.pop(name, None)
            else:
                sys.modules[name] = module
        if attribute is None:
            vars(package).pop("buffers", None)
        else:
            package.buffers = attribute  # type: ignore[attr-defined]


def host(array: object) -> np.ndarray:
    return array.get() if hasattr(array, "get") else np.asarray(array)  # type: ignore[attr-defined]


def test_the_sandbox_draws_fill_buffers_with_the_constant(buffers: types.ModuleType) -> None:
    source = f"#include <cuda_fp16.h>\n#include <cuda_bf16.h>\n{ROW_STATS}".replace(
        's = { role = "inout", dtype = "float32", shape = ["rows"], init = { fill = 0.5 } }',
        's = { role = "inout", dtype = "float32", shape = ["rows"], init = { fill = 0.5 } }\n'
        'h = { role = "inout", dtype = "float16", shape = ["rows"], init = { fill = "-inf" } }\n'
        'b = { role = "inout", dtype = "bfloat16", shape = ["rows"], init = { fill = -inf } }\n'
        'first = { role = "inout", dtype = "int32", shape = ["rows"], init = { fill = -1 } }',
    ).replace("float* s, int cols_", "float* s, half* h, __nv_bfloat16* b, int* first, int cols_")
    problem, _ = resolve(parse_one(source))
    # The random draws are device kernels (CuPy ElementwiseKernels): only the constants here.
    constants = tuple(a for a in problem.arguments if a.distribution.kind == "value")
    inputs = buffers.draw_inputs(replace(problem, arguments=constants), seed=7)
    assert np.all(host(inputs.arrays["m"]) == -np.inf) and host(inputs.arrays["m"]).dtype == np.float32
    assert np.all(host(inputs.arrays["s"]) == np.float32(0.5))
    assert np.all(host(inputs.arrays["h"]) == -np.inf) and host(inputs.arrays["h"]).dtype == np.float16
    bits = float32_to_bfloat16_bits(np.float32(-np.inf))[()]
    assert bits == 0xFF80 and np.all(host(inputs.arrays["b"]) == bits)  # bfloat16 travels as its bits
    assert np.all(host(inputs.arrays["first"]) == -1) and host(inputs.arrays["first"]).dtype == np.int32
    assert inputs.scalars["block_size"] == 256 and isinstance(inputs.scalars["block_size"], np.int32)


# -- scalars that follow the launch -----------------------------------------------------------------------


def block_scalar_spec(
    value: str, block: str = "[256]", dtype: str = "int32", c_type: str = "int"
) -> KernelSpec:
    kernel = SCALE.replace("int n)", f"int n, {c_type} Bc)")
    args = SCALE_ARGS + f'Bc = {{ dtype = "{dtype}", value = {value} }}\n'
    rest = f'[launch]\nblock = {block}\ngrid = ["ceil_div(n, block.x)"]\n'
    return parse_one(scale_file(args=args, rest=rest, kernel=kernel))


@pytest.mark.parametrize(
    ("value", "block", "at_spec", "at_other", "other"),
    [
        ('"block.x"', "[256]", 256, 512, (512,)),
        ('"block.x * 2"', "[256]", 512, 1024, (512,)),
        ('"block.x * block.y"', "[32, 8]", 256, 512, (32, 16)),
        ('"ceil_div(n, block.x)"', "[256]", 4, 2, (512,)),
    ],
)
def test_a_scalar_written_with_the_block_takes_each_launchs_block(
    value: str, block: str, at_spec: int, at_other: int, other: tuple[int, ...]
) -> None:
    spec = block_scalar_spec(value, block)
    problem, launch = resolve(spec)
    assert argument(problem, "Bc").distribution.value == at_spec
    assert launch.scalars == (LaunchScalar(3, "Bc", "int32", at_spec),)
    _, tuned = resolve(spec, block=other)
    assert tuned.scalars == (LaunchScalar(3, "Bc", "int32", at_other),)
    assert reparses(spec, SCALE.replace("int n)", "int n, int Bc)")) == spec


def test_a_float_scalar_may_follow_the_block_and_scalars_of_the_sizes_stay_with_the_problem() -> None:
    spec = block_scalar_spec('"1.0 / block.x"', dtype="float32", c_type="float")
    _, launch = resolve(spec, block=(512,))
    assert launch.scalars == (LaunchScalar(3, "Bc", "float32", 1 / 512),)
    plain = block_scalar_spec('"n * 2"')
    problem, launch = resolve(plain, block=(512,))
    assert launch.scalars == () and argument(problem, "Bc").distribution.value == 2000


def test_the_block_is_still_refused_where_it_has_no_meaning() -> None:
    shape = scale_file(args=SCALE_ARGS.replace('shape = ["n"] }\nn', 'shape = ["block.x"] }\nn'))
    error = the_error(shape)
    assert pointed(shape, error) == "block.x"
    assert "only known in [launch] grid and shared_bytes, a scalar's value and instantiate" in error.message
    kernel = SCALE.replace("int n)", "int n, int Bc)")
    wrong_axis = scale_file(args=SCALE_ARGS + 'Bc = { value = "block.w" }\n', kernel=kernel)
    error = the_error(wrong_axis)
    assert pointed(wrong_axis, error) == "block.w" and "block has x, y and z, not 'w'" in error.message
    too_big = scale_file(
        args=SCALE_ARGS + 'Bc = { dtype = "int8", value = "block.x" }\n',
        kernel=kernel.replace("int Bc", "signed char Bc"),
    )
    assert "the value of Bc is 256, outside int8's range [-128, 127]" in the_error(too_big).message


def baseline_for(target: KernelTarget) -> Baseline:
    """The original as the engine holds it before the GPU: its problems and launches (not compiled)."""
    assert target.spec is not None
    problems, _, _ = problems_for(target.spec)
    return Baseline(target, target.spec, problems, None, CompileResult(False, None))


def test_a_tuned_candidate_carries_its_own_scalar_and_the_original_keeps_its_own(tmp_path: Path) -> None:
    target = target_of(tmp_path, ROW_STATS)
    baseline = baseline_for(target)
    _, original_launches, _ = problems_for(target.spec)  # type: ignore[arg-type]
    (candidate,) = [c for c in propose_launch_configs(target) if c.block == (512,)]
    launches = Engine(EngineSettings(use_cache=False))._launches(baseline, candidate)
    assert isinstance(launches, tuple) and len(launches) == len(baseline.problems) == 2
    assert all(launch.scalars == (LaunchScalar(4, "block_size", "int32", 512),) for launch in launches)
    assert all(
        launch.scalars == (LaunchScalar(4, "block_size", "int32", 256),) for launch in original_launches
    )
    # The problems both are run on are the same; the PyTorch oracle sees the spec's value.
    assert all(argument(p, "block_size").distribution.value == 256 for p in baseline.problems)


def test_every_launch_puts_its_own_scalars_in_place(buffers: types.ModuleType) -> None:
    plan = LaunchPlan((4, 1, 1), (512, 1, 1), scalars=(LaunchScalar(2, "Bc", "int32", 512),))
    args = ("x", "y", np.int32(256), np.int32(1000))
    placed = buffers.with_launch_scalars(plan, args)
    assert placed[:2] == ("x", "y") and placed[3] == 1000
    assert placed[2] == 512 and isinstance(placed[2], np.int32)
    assert buffers.with_launch_scalars(LaunchPlan((1, 1, 1), (256, 1, 1)), args) is args


# -- template arguments that follow the block -------------------------------------------------------------


def test_the_name_expression_follows_the_block(tmp_path: Path) -> None:
    target = target_of(tmp_path, ROW_STATS)
    assert target.name_expression == "row_stats<256>"
    assert target.name_expression_at((512,)) == "row_stats<512>"
    (candidate,) = [c for c in propose_launch_configs(target) if c.block == (512,)]
    assert 'instantiate = "row_stats<block.x>"' in candidate.source  # the file keeps it as written
    assert target.name_expression_at(candidate.block, candidate.source) == "row_stats<512>"


@pytest.mark.parametrize(
    ("template", "instantiate", "block", "expected"),
    [
        ("template <typename T, int BLOCK>", "scan<float, block.x>", "[512]", "scan<float, 512>"),
        ("template <int THREADS>", "scan<block.x * block.y>", "[32, 8]", "scan<256>"),
        ("template <int TILE, int ROWS>", "scan<block.x, 2 * block.y>", "[32, 8]", "scan<32, 16>"),
        ("template <typename T, int BLOCK>", "scan<float, 128>", "[512]", "scan<float, 128>"),
    ],
)
def test_instantiate_is_evaluated_at_the_block(
    template: str, instantiate: str, block: str, expected: str
) -> None:
    kernel = f"{template}\n__global__ void scan(const float* x, float* y, int n) {{ }}\n"
    rest = f'[launch]\nblock = {block}\ngrid = ["ceil_div(n, block.x)"]\n'
    spec = parse_one(scale_file(top=f'instantiate = "{instantiate}"\n', rest=rest, kernel=kernel))
    assert instantiation(spec) == expected
    assert spec.instantiate == instantiate and reparses(spec, kernel) == spec


@pytest.mark.parametrize(
    ("template", "instantiate", "text", "message"),
    [
        ("template <int BLOCK>", "scan<block.w>", "block.w", "block has x, y and z, not 'w'"),
        (
            "template <int BLOCK>",
            "scan<static_cast<int>(block.x)>",
            "static_cast<int>(block.x)",
            "comparisons are not allowed here",
        ),
        (
            "template <typename T>",
            "scan<block.x>",
            "block.x",
            "T is a type parameter (typename T): "
            "block.x/y/z can only give a value parameter such as int BLOCK",
        ),
        (
            "template <int BLOCK>",
            "scan<256 // (block.x - 256)>",
            "256 // (block.x - 256)",
            "division by zero",
        ),
    ],
)
def test_a_bad_block_argument_points_inside_instantiate(
    template: str, instantiate: str, text: str, message: str
) -> None:
    kernel = f"{template}\n__global__ void scan(const float* x, float* y, int n) {{ }}\n"
    source = scale_file(top=f'instantiate = "{instantiate}"\n', kernel=kernel)
    error = the_error(source)
    assert error.line == 1 and pointed(source, error) == text
    assert message in error.message


def test_the_engine_compiles_a_tuned_candidate_at_its_block(tmp_path: Path) -> None:
    """NVRTC runs without a GPU: the candidate at block 512 is the kernel instantiated at 512."""
    target = target_of(tmp_path, ROW_STATS)
    engine = Engine(EngineSettings(arch="sm_90", use_cache=False))
    (candidate,) = [c for c in propose_launch_configs(target) if c.block == (512,)]
    tuned = engine.compile(target, candidate.source, candidate)
    original = engine.compile(target, target.source)
    assert tuned.ok and tuned.kernel is not None and original.ok and original.kernel is not None, tuned.log
    assert (tuned.kernel.name, original.kernel.name) == ("row_stats<512>", "row_stats<256>")
    assert "ILi512E" in tuned.kernel.lowered_name and "ILi256E" in original.kernel.lowered_name


# -- a block written as a number in instantiate -----------------------------------------------------------


def test_a_template_argument_equal_to_the_block_is_tuned_with_it(tmp_path: Path) -> None:
    target = target_of(tmp_path, ROW_STATS_LITERAL)
    tied = block_template_argument(target)
    assert tied is not None and (tied.parameter, tied.position, tied.how) == (
        "BLOCK",
        0,
        "in __launch_bounds__",
    )
    candidates = {c.block: c for c in propose_launch_configs(target)}
    assert set(candidates) == {(64,), (128,), (512,), (1024,)}
    chosen = candidates[(512,)]
    assert (
        chosen.description
        == "block 512 (512 threads; was 256) with BLOCK = 512 (the block size, in __launch_bounds__)"
    )
    changed = [
        (old, new)
        for old, new in zip(target.source.splitlines(), chosen.source.splitlines(), strict=True)
        if old != new
    ]
    assert changed == [
        ('instantiate = "row_stats<256>"', 'instantiate = "row_stats<512>"'),
        ("block = [256]", "block = [512]"),
    ]
    assert target.name_expression_at(chosen.block, chosen.source) == "row_stats<512>"
    again = load_targets(target.path, chosen.source).find("row_stats")
    assert again is not None and again.spec is not None and again.spec.launch.block == (512,)


TILED = """\
/* cuda-agent
instantiate = "tiled<float, {argument}>"
[sizes]
n = 4096
[args]
x = {{ role = "input", shape = ["n"] }}
y = {{ role = "output", shape = ["n"] }}
n = {{ value = "n" }}
[launch]
block = [{block}]
grid = ["ceil_div(n, block.x)"]
*/
template <typename T, int TILE>
__global__ void tiled(const T* x, T* y, int n) {{
    {use}
}}
"""


@pytest.mark.parametrize(
    ("use", "how"),
    [
        ("__shared__ T tile[TILE];", "as a __shared__ array's size"),
        ("for (int i = threadIdx.x; i < n; i += TILE) y[i] = x[i];", "as a loop's stride"),
    ],
)
def test_a_template_argument_used_as_the_block_size_in_the_body_is_tied(
    tmp_path: Path, use: str, how: str
) -> None:
    target = target_of(tmp_path, TILED.format(argument=128, block=128, use=use), "tiled.cu")
    tied = block_template_argument(target)
    assert tied is not None and (tied.parameter, tied.position, tied.how) == ("TILE", 1, how)
    chosen = next(c for c in propose_launch_configs(target) if c.block == (256,))
    assert target.name_expression_at(chosen.block, chosen.source) == "tiled<float, 256>"


def test_a_template_argument_is_not_tied_when_it_is_not_the_block(tmp_path: Path) -> None:
    unused = target_of(tmp_path, TILED.format(argument=128, block=128, use="y[0] = x[0];"), "unused.cu")
    assert block_template_argument(unused) is None
    chosen = next(c for c in propose_launch_configs(unused) if c.block == (256,))
    assert unused.name_expression_at(chosen.block, chosen.source) == "tiled<float, 128>"
    other = TILED.format(argument=512, block=256, use="__shared__ T tile[TILE];")
    assert block_template_argument(target_of(tmp_path, other, "other.cu")) is None


def test_a_bound_given_by_a_template_number_caps_the_block(tmp_path: Path) -> None:
    source = ROW_STATS_LITERAL.replace('"row_stats<256>"', '"row_stats<512>"')
    target = target_of(tmp_path, source)  # BLOCK = 512 with block [256]: not the block, but the bound
    assert block_template_argument(target) is None
    assert {c.block for c in propose_launch_configs(target)} == {(64,), (128,), (512,)}


def test_no_tuning_when_the_host_code_fixes_the_template_argument(tmp_path: Path) -> None:
    host = "\nvoid run(const float* x, float* m, float* s, int rows, int cols) {\n" \
        "    row_stats<256><<<rows, 256, 2048>>>(x, m, s, cols, 256);\n}\n"  # fmt: skip
    for source in (ROW_STATS + host, ROW_STATS_LITERAL + host):
        assert propose_launch_configs(target_of(tmp_path, source)) == []


# -- compiler settings -------------------------------------------------------------------------------------


def test_flags_and_include_dirs_are_kept_and_rendered() -> None:
    top = (
        'flags = ["--expt-relaxed-constexpr", "-DUSE_FAST=1", "-Xptxas", "-v"]\n'
        'include_dirs = ["../include", "third_party/cutlass/include"]\n'
    )
    spec = parse_one(scale_file(top=top))
    assert spec.flags == ("--expt-relaxed-constexpr", "-DUSE_FAST=1", "-Xptxas", "-v")
    assert spec.include_dirs == ("../include", "third_party/cutlass/include")
    text = render_spec(spec)
    assert 'flags = ["--expt-relaxed-constexpr", "-DUSE_FAST=1", "-Xptxas", "-v"]' in text
    assert text.index("include_dirs") < text.index("[sizes]")  # top-level keys before the tables
    assert reparses(spec, SCALE) == spec
    assert parse_one(scale_file()).flags == () and "flags" not in render_spec(parse_one(scale_file()))


@pytest.mark.parametrize(
    ("top", "text", "message"),
    [
        (
            'flags = "x"\n',
            '"x"',
            'flags is a list of strings, e.g. flags = ["--use_fast_math", "-DTILE=32"]; got a string ("x")',
        ),
        ("flags = [1]\n", "1", "each of flags is a non-empty string, not int 1"),
        ('flags = [""]\n', '""', "each of flags is a non-empty string, not an empty string"),
        (
            'flags = ["-o"]\n',
            '"-o"',
            "flag '-o' is not allowed: cuda-agent chooses the output itself (a cubin that it loads)",
        ),
        (
            'flags = ["-ofile.cubin"]\n',
            '"-ofile.cubin"',
            "flag '-ofile.cubin' is not allowed: cuda-agent chooses the output itself",
        ),
        (
            'flags = ["--options-file=more.txt"]\n',
            '"--options-file=more.txt"',
            "flag '--options-file=more.txt' is not allowed: flags are given one by one, not through a file",
        ),
        (
            'flags = ["-arch=sm_80"]\n',
            '"-arch=sm_80"',
            "flag '-arch=sm_80' is not allowed: cuda-agent compiles for the GPU it runs on",
        ),
        (
            'flags = ["--cubin"]\n',
            '"--cubin"',
            "flag '--cubin' is not allowed: cuda-agent chooses the output itself (a cubin that it loads)",
        ),
        (
            'flags = ["-I../include"]\n',
            '"-I../include"',
            "flag '-I../include' is not allowed: give include folders as "
            'include_dirs = ["../include"] (relative to this file\'s folder), which are made absolute',
        ),
        (
            'flags = ["-D USE_FAST=1"]\n',
            '"-D USE_FAST=1"',
            "flag '-D USE_FAST=1' holds a space: each flag is one command-line word",
        ),
        ('flags = ["evil.cu"]\n', '"evil.cu"', "flag 'evil.cu' is not an option (they start with '-')"),
        (
            'include_dirs = "../include"\n',
            '"../include"',
            'include_dirs is a list of strings, e.g. include_dirs = ["../include"]',
        ),
        ('include_dirs = [""]\n', '""', "each of include_dirs is a non-empty string, not an empty string"),
    ],
)
def test_bad_compiler_settings_are_errors_at_the_value(top: str, text: str, message: str) -> None:
    source = scale_file(top=top)
    error = the_error(source)
    assert error.line == 1 and pointed(source, error) == text
    assert error.message.startswith(message), error.message


# -- sizes of 0 --------------------------------------------------------------------------------------------


def test_an_offset_of_zero_is_a_size_a_shape_may_add() -> None:
    source = scale_file(
        args=SCALE_ARGS.replace('shape = ["n"] }\ny', 'shape = ["n + offset"] }\ny'),
        rest=SCALE_LAUNCH + "[verify]\nsizes = [{ n = 7, offset = 0 }, { offset = 3 }]\n",
    ).replace("n = 1000\n", "n = 1000\noffset = 0\n")
    spec = parse_one(source)
    problem, _ = resolve(spec)
    assert problem.sizes == {"n": 1000, "offset": 0} and argument(problem, "x").shape == (1000,)
    problems, _, _ = problems_for(spec)
    assert [argument(p, "x").shape for p in problems] == [(1000,), (7,), (1003,)]


# -- on the GPU --------------------------------------------------------------------------------------------


@pytest.fixture(scope="module")
def engine() -> Iterator[Engine]:
    with Engine(EngineSettings(timeout_s=5.0, use_cache=False)) as shared:
        yield shared


@pytest.mark.gpu
@pytest.mark.parametrize(
    "source", [ROW_STATS, ROW_STATS_SELF, ROW_STATS_LITERAL], ids=["oracle", "original", "literal"]
)
def test_fills_block_scalars_and_block_templates_verify_on_the_gpu(
    engine: Engine, tmp_path: Path, source: str
) -> None:
    """The original reads m's -inf and s's 0.5 from the fills (x is in [-2, -1): a fill of 0 would be the
    maximum); tuned to 512 threads, the candidate is instantiated at 512 and passed block_size = 512,
    while the original it is compared with (without an oracle) runs at 256 with its own 256."""
    target = target_of(tmp_path, source)
    baseline = engine.baseline(target)
    assert baseline.usable, baseline.error or baseline.verification or baseline.compile.log
    candidates = [c for c in propose_launch_configs(target) if c.block in ((128,), (512,), (1024,))]
    assert len(candidates) == 3
    for result in engine.evaluate(baseline, candidates):
        assert result.verified, (result.candidate.description, result.reason)


@pytest.mark.gpu
def test_a_stale_block_scalar_is_caught(engine: Engine, tmp_path: Path) -> None:
    """Without its own block_size, a candidate launched with 512 threads would get the problem's 256: it
    sums each row twice over, and verification says so. Why every kernel carries its own scalars."""
    from cuda_agent.sandbox.plan import KernelUnderTest
    from cuda_agent.sandbox.protocol import VerifyRequest
    from cuda_agent.sandbox.reports import VerificationReport

    target = target_of(tmp_path, ROW_STATS)
    baseline = engine.baseline(target)
    assert baseline.usable, baseline.error or baseline.verification
    (candidate,) = [c for c in propose_launch_configs(target) if c.block == (512,)]
    compiled = engine.compile(target, candidate.source, candidate)
    launches = engine._launches(baseline, candidate)
    assert compiled.kernel is not None and isinstance(launches, tuple)
    for own in (True, False):
        plans = launches if own else tuple(replace(launch, scalars=()) for launch in launches)
        kernel = KernelUnderTest(compiled.kernel, plans)
        report = engine._sandbox_verify(VerifyRequest(kernel, baseline.problems, None, input_sets=2))
        assert isinstance(report, VerificationReport)
        if own:
            assert report.passed, report.reason
        else:
            assert not report.passed and report.failures[0].check == "mismatch"
            assert report.failures[0].argument == "s"
