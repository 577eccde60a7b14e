"""Spec comments: parsing, every error at the exact spot in the .cu file, resolving, rendering back.

Positions are 0-based lines and UTF-8 byte columns of the .cu file (what tree-sitter and the editor layer
use); each error test asserts the numbers and the text they point at.
"""

from __future__ import annotations

import ast
import textwrap
from dataclasses import replace
from pathlib import Path

import pytest
from cuda_agent.agent.kernels import find_kernels
from cuda_agent.agent.spec import (
    ExpressionError,
    InitSpec,
    KernelSpec,
    SpecError,
    SpecResolveError,
    ToleranceSpec,
    canonical_dtype,
    complete_sizes,
    parse_expression,
    parse_real_expression,
    parse_specs,
    render_spec,
    resolve,
    validate_oracle,
)
from cuda_agent.sandbox.plan import Distribution, LaunchPlan, Tolerance
from hypothesis import given, settings
from hypothesis import strategies as st

SOFTMAX_KERNEL = """\
__global__ void softmax(const float* x, float* y, const half* w, const int* idx, int rows_) {
  int c = blockIdx.x * blockDim.x + threadIdx.x;
  int r = blockIdx.y * blockDim.y + threadIdx.y;
  if (r < rows_) y[r * 1024 + c] = x[r * 1024 + c] * (float)w[c] + idx[r];
}
"""

FULL_SPEC = """\
/* cuda-agent
# kernel = "softmax"
[sizes]
rows = 4096
cols = "1 << 10"
[args]
x = { role = "input", dtype = "float32", shape = ["rows", "cols"], init = "normal" }
y = { role = "output", dtype = "float32", shape = ["rows", "cols"] }
w = { role = "input", dtype = "float16", shape = ["cols"], init = { dist = "uniform", low = -1, high = 1 } }
idx = { role = "input", dtype = "int32", shape = ["rows"], init = { dist = "integers", high = "cols" } }
rows_ = { role = "scalar", dtype = "int32", value = "rows" }
[launch]
block = [32, 8]
grid = ["ceil_div(cols, block.x)", "ceil_div(rows, block.y)"]
shared_bytes = "block.x * block.y * 4"
[verify]
sizes = [{ rows = 7, cols = 1000 }]
oracle = { y = "torch.softmax(x, dim=-1)" }
tolerance = { atol = 1e-5, rtol = 1e-5 }
reduction = "cols"
[roofline]
flops = "5 * rows * cols"
*/
"""

VECTOR_KERNEL = "__global__ void scale(const float* x, float* y, int n) { }\n"
VECTOR_ARGS = """\
x = { role = "input", dtype = "float32", shape = ["n"] }
y = { role = "output", dtype = "float32", shape = ["n"] }
n = { role = "scalar", dtype = "int32", value = "n" }
"""
VECTOR_LAUNCH = '[launch]\nblock = [256]\ngrid = ["ceil_div(n, block.x)"]\n'


def parse(source: str) -> tuple[dict[str, KernelSpec], list[SpecError]]:
    return parse_specs(source, find_kernels(source))


def parse_one(source: str) -> KernelSpec:
    specs, errors = parse(source)
    assert errors == []
    (spec,) = specs.values()
    return spec


def vector_file(toml: str, kernel: str = VECTOR_KERNEL) -> str:
    return f"/* cuda-agent\n{toml}*/\n{kernel}"


def vector_spec(
    sizes: str = "[sizes]\nn = 1000\n", args: str = VECTOR_ARGS, rest: str = VECTOR_LAUNCH
) -> str:
    return vector_file(f"{sizes}[args]\n{args}{rest}")


def errors_of(source: str) -> list[SpecError]:
    specs, errors = parse(source)
    assert errors, "expected errors"
    assert not specs, "a spec with errors must not be returned"
    return errors


def the_error(source: str) -> SpecError:
    errors = errors_of(source)
    assert len(errors) == 1, [e.message for e in errors]
    return errors[0]


def pointed(source: str, error: SpecError) -> str:
    """The text an error's range covers (single-line ranges)."""
    assert error.line == error.end_line
    return source.encode().split(b"\n")[error.line][error.column : error.end_column].decode()


# --- the full spec --------------------------------------------------------------------------------------


def test_full_spec_parses_with_every_field():
    source = "#include <cuda_fp16.h>\n\n" + FULL_SPEC + SOFTMAX_KERNEL
    spec = parse_one(source)
    assert spec.kernel == "softmax" and not spec.inferred
    assert spec.sizes == {"rows": 4096, "cols": 1024}
    assert spec.size_expressions == {"rows": "4096", "cols": "1 << 10"}
    assert [(a.name, a.role, a.dtype, a.shape) for a in spec.arguments] == [
        ("x", "input", "float32", ("rows", "cols")),
        ("y", "output", "float32", ("rows", "cols")),
        ("w", "input", "float16", ("cols",)),
        ("idx", "input", "int32", ("rows",)),
        ("rows_", "scalar", "int32", ()),
    ]
    w, idx, rows_ = spec.arguments[2:]
    assert w.init == InitSpec("uniform", low=-1, high=1)
    assert idx.init == InitSpec("integers", low=0, high="cols")
    assert rows_.value == "rows" and rows_.init is None
    assert spec.launch.block == (32, 8)
    assert spec.launch.grid == ("ceil_div(cols, block.x)", "ceil_div(rows, block.y)")
    assert spec.launch.shared_bytes == "block.x * block.y * 4"
    assert spec.verify_sizes == ({"rows": 7, "cols": 1000},)
    assert spec.oracle == {"y": "torch.softmax(x, dim=-1)"}
    assert spec.tolerance == ToleranceSpec(1e-5, 1e-5) and spec.output_tolerances == {}
    assert (spec.reduction, spec.flops, spec.bytes_moved) == ("cols", "5 * rows * cols", None)
    # Where it is: the comment from line 2, and the block value the optimizer rewrites in place.
    assert spec.span is not None and (spec.span.start_line, spec.span.end_line) == (2, 24)
    assert spec.block_span is not None
    assert source.encode()[spec.block_span.start_byte : spec.block_span.end_byte] == b"[32, 8]"
    assert (spec.block_span.start_line, spec.block_span.start_column) == (14, 8)


def test_kernel_key_picks_a_kernel_and_default_is_the_next_one():
    two = "__global__ void a(float* y, int n) { }\n" + VECTOR_KERNEL
    explicit = vector_file(f'kernel = "scale"\n[sizes]\nn = 8\n[args]\n{VECTOR_ARGS}{VECTOR_LAUNCH}', two)
    assert list(parse(explicit)[0]) == ["scale"]
    # Written between the two kernels, without `kernel`: it belongs to the one below it.
    between = "__global__ void a(float* y, int n) { }\n" + vector_spec()
    assert list(parse(between)[0]) == ["scale"]


def test_defaults_role_for_value_parameters_dtype_from_c_type_init_by_dtype():
    args = (
        'x = { role = "input", shape = ["n"] }\ny = { role = "output", shape = ["n"] }\nn = { value = "n" }\n'
    )
    spec = parse_one(vector_spec(args=args))
    x, y, n = spec.arguments
    assert (x.dtype, n.role, n.dtype) == ("float32", "scalar", "int32")
    assert x.init == InitSpec("normal") and y.init == InitSpec("normal")
    ints_source = vector_spec(args=VECTOR_ARGS.replace("float32", "int32"))
    ints = parse_one(ints_source.replace("const float* x, float* y", "const int* x, int* y"))
    assert ints.arguments[0].init == InitSpec("integers", low=0, high=100)


@pytest.mark.parametrize(
    ("written", "canonical"),
    [
        *[("f32", "float32"), ("float", "float32"), ("half", "float16"), ("fp16", "float16")],
        *[("bf16", "bfloat16"), ("double", "float64"), ("int", "int32"), ("torch.int64", "int64")],
        *[("uint", "uint32"), ("UInt8", "uint8"), ("unsigned long long", "uint64"), ("floaty", None)],
    ],
)
def test_dtype_aliases(written: str, canonical: str | None):
    assert canonical_dtype(written) == canonical


def test_javadoc_decorated_comment_and_errors_inside_it():
    source = (
        "/* cuda-agent\n"
        " * [sizes]\n"
        " * n = 64\n"
        " * [args]\n"
        ' * x = { role = "input", dtype = "float32", shape = ["n"] }\n'
        ' * y = { role = "output", dtype = "float32", shape = ["m"] }\n'
        ' * n = { role = "scalar", dtype = "int32", value = "n" }\n'
        " * [launch]\n"
        " * block = [256]\n"
        ' * grid = ["ceil_div(n, block.x)"]\n'
        " */\n" + VECTOR_KERNEL
    )
    error = the_error(source)
    assert (error.line, error.column, error.end_column) == (5, 55, 56)
    assert pointed(source, error) == "m"
    assert "unknown size 'm'" in error.message and "sizes are: n" in error.message
    assert parse_one(source.replace('["m"]', '["n"]')).sizes == {"n": 64}


def test_templated_kernel_with_instantiate_takes_dtypes_from_the_instantiation():
    kernel = "template <typename T, int BLOCK>\n__global__ void scale(const T* x, T* y, int n) { }\n"
    args = (
        'x = { role = "input", shape = ["n"] }\ny = { role = "output", shape = ["n"] }\nn = { value = "n" }\n'
    )
    source = vector_file(
        f'instantiate = "scale<half, 128>"\n[sizes]\nn = 8\n[args]\n{args}{VECTOR_LAUNCH}', kernel
    )
    spec = parse_one(source)
    assert spec.instantiate == "scale<half, 128>"
    assert [a.dtype for a in spec.arguments] == ["float16", "float16", "int32"]


# --- errors, each at its token ------------------------------------------------------------------------


def test_unknown_dtype_suggests_the_nearest():
    source = vector_spec(args=VECTOR_ARGS.replace('dtype = "float32", shape', 'dtype = "flaot32", shape', 1))
    error = the_error(source)
    assert (error.line, error.column, error.end_line, error.end_column) == (4, 30, 4, 39)
    assert pointed(source, error) == '"flaot32"'
    assert error.message == "unknown dtype 'flaot32'; did you mean 'float32'?"
    assert error.kernel == "scale"


def test_unknown_role_and_unknown_key():
    source = vector_spec(
        args=VECTOR_ARGS.replace('role = "output"', 'role = "ouput"').replace('value = "n"', 'valeu = "n"')
    )
    role, key = errors_of(source)
    assert (role.line, role.column) == (5, 13) and pointed(source, role) == '"ouput"'
    assert role.message == "unknown role 'ouput'; did you mean 'output'?"
    assert (key.line, key.column) == (6, 40) and pointed(source, key) == "valeu"
    assert key.message == "unknown key 'valeu' in args.n; did you mean 'value'?"


def test_undefined_size_points_inside_the_expression_string():
    source = vector_spec(args=VECTOR_ARGS.replace('shape = ["n"] }', 'shape = ["n * colz"] }', 1))
    error = the_error(source)
    assert (error.line, error.column, error.end_column) == (4, 55, 59)
    assert pointed(source, error) == "colz"
    assert error.message == "x.shape[0] = \"n * colz\": unknown size 'colz' (sizes are: n)"


def test_utf8_byte_columns_after_non_ascii_text():
    # "ñ" is two bytes: the error column counts bytes, as tree-sitter does. (Sizes may have any Python name.)
    source = vector_spec(sizes='[sizes]\nn = 4\n"ñ" = 2\nm = "ñ + colz"\n"a b" = 1\n')
    first, second = errors_of(source)
    assert (first.line, first.column, first.end_column) == (4, 10, 14)
    assert pointed(source, first) == "colz"
    assert first.message == "m = \"ñ + colz\": unknown size 'colz' (sizes are: n, ñ, a b)"
    assert second.line == 5 and pointed(source, second) == '"a b"' and "identifier" in second.message


def test_bad_expression_syntax_and_slash_division():
    source = vector_spec(sizes='[sizes]\nn = "1000 +"\nm = "n / 2"\n')
    syntax, slash = errors_of(source)
    assert syntax.line == 2 and syntax.message.startswith('n = "1000 +": not a valid expression')
    assert (slash.line, slash.column, slash.end_column) == (3, 5, 10)
    assert slash.message == (
        'm = "n / 2": sizes are integers: use // for integer division or ceil_div(a, b), not /'
    )


def test_sizes_may_only_use_sizes_above_them():
    error = the_error(vector_spec(sizes='[sizes]\nn = "m * 2"\nm = 4\n'))
    assert error.line == 2 and "uses m, defined after it" in error.message


def test_missing_and_extra_arguments():
    args = (
        VECTOR_ARGS.replace('n = { role = "scalar", dtype = "int32", value = "n" }\n', "")
        + 'z = { role = "input" }\n'
    )
    source = vector_spec(args=args)
    missing, extra = errors_of(source)
    assert (missing.line, missing.column) == (3, 1) and pointed(source, missing) == "args"
    assert missing.message.startswith("parameter 'n' (int n) has no entry in [args]: add n = {")
    assert (extra.line, extra.column) == (6, 0) and pointed(source, extra) == "z"
    assert extra.message == "'z' is not a parameter of scale(const float* x, float* y, int n)"


def test_buffer_without_shape_and_scalar_without_value():
    args = VECTOR_ARGS.replace(', shape = ["n"] }', " }", 1).replace(', value = "n" }', " }")
    source = vector_spec(args=args)
    shape, value = errors_of(source)
    assert (shape.line, shape.column) == (4, 0) and pointed(source, shape) == "x"
    assert "needs a shape" in shape.message
    assert (value.line, value.column) == (6, 0) and 'add value = "n"' in value.message


def test_pointer_and_scalar_roles_must_match_the_signature():
    args = VECTOR_ARGS.replace('role = "output"', 'role = "scalar"').replace(
        'n = { role = "scalar"', 'n = { role = "input"'
    )
    source = vector_spec(args=args)
    pointer, value = errors_of(source)
    assert pointer.line == 5 and pointed(source, pointer) == '"scalar"'
    assert pointer.message == "y is a pointer (float* y): its role is input, output or inout"
    assert value.line == 6 and value.message == 'n is not a pointer (int n): give it role = "scalar"'


def test_const_pointer_cannot_be_an_output_and_dtype_must_match_c_type():
    args = VECTOR_ARGS.replace('"output", dtype = "float32"', '"output", dtype = "float16"')
    args = args.replace('role = "input"', 'role = "output"')
    const, dtype = errors_of(vector_spec(args=args))
    assert const.line == 4 and "pointer to const" in const.message
    assert dtype.line == 5 and dtype.message.startswith("y is declared float in the kernel, which is float32")


def test_block_limits_and_grid_rank():
    source = vector_spec(rest='[launch]\nblock = [64, 32]\ngrid = ["ceil_div(n, block.x)"]\n')
    threads = the_error(source)  # a 1-D grid of 2-D blocks is fine: CUDA pads each to 3-D
    assert (threads.line, threads.column) == (8, 8) and pointed(source, threads) == "[64, 32]"
    assert threads.message == "a block of 64 × 32 = 2048 threads is more than CUDA's 1024 per block"
    rank = the_error(vector_spec(rest='[launch]\nblock = [64]\ngrid = ["n", "1", "1", "1"]\n'))
    assert rank.line == 9 and rank.message == "grid has 4 dims; CUDA grids have 1 to 3"
    four = the_error(vector_spec(rest='[launch]\nblock = [1, 1, 1, 1]\ngrid = ["n"]\n'))
    assert four.line == 8 and "1 to 3 integers" in four.message


def test_grid_may_use_the_block_but_sizes_may_not():
    error = the_error(vector_spec(sizes='[sizes]\nn = "block.x * 4"\n'))
    assert error.message == (
        'n = "block.x * 4": the block shape (block.x/y/z) is only known in [launch] grid and shared_bytes, '
        "a scalar's value and instantiate"
    )


def test_bad_oracle_points_at_the_name():
    rest = VECTOR_LAUNCH + "[verify]\noracle = { y = \"x * __import__('os').getpid()\" }\n"
    source = vector_spec(rest=rest)
    error = the_error(source)
    assert (error.line, error.column) == (11, 20) and pointed(source, error) == "__import__"
    assert error.message == "names starting with '_' are not allowed: '__import__'"
    wrong_output = the_error(vector_spec(rest=VECTOR_LAUNCH + '[verify]\noracle = { x = "x" }\n'))
    assert wrong_output.message == "'x' is not an output (outputs: y)"


def test_template_kernel_needs_instantiate_and_others_must_not_have_it():
    kernel = "template <typename T>\n__global__ void scale(const T* x, T* y, int n) { }\n"
    error = the_error(vector_spec().replace(VECTOR_KERNEL, kernel))
    assert error.message.startswith(
        "'scale' is a template (template <typename T>): add instantiate = \"scale<float>\""
    )
    assert error.line == 0  # no `kernel` key: shown on the spec's first line
    extra = the_error(
        vector_file(f'instantiate = "scale<float>"\n[sizes]\nn = 4\n[args]\n{VECTOR_ARGS}{VECTOR_LAUNCH}')
    )
    assert (extra.line, extra.message) == (1, "'scale' is not a template: remove instantiate")


def test_kernel_name_not_found_and_no_kernel_after_the_spec():
    source = vector_file(f'kernel = "scael"\n[sizes]\nn = 4\n[args]\n{VECTOR_ARGS}{VECTOR_LAUNCH}')
    error = the_error(source)
    assert (error.line, error.column) == (1, 9) and error.message.endswith("did you mean 'scale'?")
    orphan = the_error(VECTOR_KERNEL + vector_spec().replace(VECTOR_KERNEL, ""))
    assert (orphan.line, orphan.column, orphan.end_column) == (1, 0, 13)
    assert orphan.message.startswith("no __global__ kernel follows this spec")


def test_second_spec_for_the_same_kernel():
    first = vector_spec().replace(VECTOR_KERNEL, "")
    specs, errors = parse(first + first + VECTOR_KERNEL)
    assert list(specs) == ["scale"]
    assert len(errors) == 1 and errors[0].line == 11 and "already has a spec (line 1)" in errors[0].message


def test_verify_sizes_unknown_name_and_breaking_the_launch():
    source = vector_spec(rest=VECTOR_LAUNCH + "[verify]\nsizes = [{ m = 3 }]\n")
    error = the_error(source)
    assert (error.line, error.column) == (11, 11) and pointed(source, error) == "m"
    # The grid divides by (n - 7): fine at the benchmark size, a division by zero at n = 7.
    launch = '[launch]\nblock = [256]\ngrid = ["n // (n - 7)"]\n[verify]\nsizes = [{ n = 7 }]\n'
    source = vector_spec(rest=launch)
    error = the_error(source)
    assert error.line == 11 and pointed(source, error) == "{ n = 7 }"
    assert error.message == 'at verify sizes n=7: launch.grid[0] = "n // (n - 7)": division by zero'


def test_many_errors_reported_at_once_in_file_order():
    source = textwrap.dedent("""\
        /* cuda-agent
        [sizes]
        rows = 4096
        cols = "colz * 2"
        [args]
        x = { role = "inptu", dtype = "flaot32", shape = ["rows", "cols"] }
        y = { role = "output", dtype = "float32" }
        n = { role = "input", dtype = "int32" }
        extra = { role = "input" }
        [launch]
        block = [64, 32]
        grid = ["ceil_div(cols, block.x)"]
        [wat]
        */
        __global__ void k(const float* x, float* y, int n, float* z) { }
        """)
    errors = errors_of(source)
    assert [(e.line, e.column) for e in errors] == [
        (3, 8),
        (4, 1),
        (5, 13),
        (5, 30),
        (6, 0),
        (7, 13),
        (8, 0),
        (10, 8),
        (12, 1),
    ]
    assert errors[0].message == "cols = \"colz * 2\": unknown size 'colz' (sizes are: rows)"  # not itself
    assert "parameter 'z'" in errors[1].message
    assert errors[-1].message.startswith("unknown key 'wat' in the spec")
    assert all(error.kernel == "k" for error in errors)


# --- TOML syntax errors -----------------------------------------------------------------------------------


def test_toml_syntax_error_position_in_the_file():
    source = "// header\n" + vector_spec(sizes="[sizes]\nn = rows * 2\n")
    error = the_error(source)
    assert (error.line, error.column) == (3, 4)
    assert error.message.startswith("TOML syntax error in spec: Invalid value")
    assert 'strings need quotes: cols = "rows * 2"' in error.message


def test_toml_syntax_error_after_non_ascii_and_on_the_marker_line():
    source = vector_spec(sizes='[sizes]\nn = 4 # größe\nm = "ü" 2\n')
    error = the_error(source)
    assert (error.line, error.column) == (3, 9)  # the "2": 8 characters but 9 bytes in
    first_line = '/* cuda-agent kernel = "scale" oops\n[sizes]\nn = 4\n*/\n' + VECTOR_KERNEL
    error = the_error(first_line)
    assert (error.line, error.column) == (0, 31)


def test_toml_duplicate_key():
    error = the_error(vector_spec(sizes="[sizes]\nn = 4\nn = 5\n"))
    assert error.line == 3 and "set twice" in error.message


# --- resolve -------------------------------------------------------------------------------------------


def full_spec() -> KernelSpec:
    return parse_one(FULL_SPEC + SOFTMAX_KERNEL)


def test_resolve_at_the_benchmark_sizes():
    problem, launch = resolve(full_spec())
    assert problem.label == "rows=4096 cols=1024"
    assert problem.sizes == {"rows": 4096, "cols": 1024}
    assert [a.shape for a in problem.arguments] == [(4096, 1024), (4096, 1024), (1024,), (4096,), ()]
    x, _, w, idx, rows_ = problem.arguments
    assert x.distribution == Distribution("normal", 0.0, 1.0)
    assert w.distribution == Distribution("uniform", low=-1.0, high=1.0)
    assert idx.distribution == Distribution("integers", low=0.0, high=1024.0)
    assert rows_.distribution == Distribution(kind="value", value=4096)
    assert launch == LaunchPlan(grid=(32, 512, 1), block=(32, 8, 1), shared_bytes=1024)
    assert problem.tolerances == {"y": Tolerance(1e-5, 1e-5)}
    assert problem.oracle == {"y": "torch.softmax(x, dim=-1)"}
    assert problem.flops == 5 * 4096 * 1024 and problem.flop_dtype == "float32"
    # Default traffic: x, w, idx read once and y written once.
    assert problem.bytes_moved == 4096 * 1024 * 4 * 2 + 1024 * 2 + 4096 * 4


def test_resolve_at_verify_sizes_with_another_block():
    spec = full_spec()
    problem, launch = resolve(spec, spec.verify_sizes[0], block=(128, 2))
    assert problem.label == "rows=7 cols=1000"
    assert problem.arguments[0].shape == (7, 1000)
    assert problem.arguments[4].distribution.value == 7
    assert launch == LaunchPlan(grid=(8, 4, 1), block=(128, 2, 1), shared_bytes=1024)
    with pytest.raises(SpecResolveError, match="at most 1024"):
        resolve(spec, block=(64, 32))


def test_default_tolerances_scale_with_the_reduction_and_per_output_overrides():
    rest = VECTOR_LAUNCH + '[verify]\nreduction = "n"\n'
    problem, _ = resolve(parse_one(vector_spec(sizes="[sizes]\nn = 10000\n", rest=rest)))
    assert problem.tolerances["y"] == Tolerance(pytest.approx(1e-4 * 100), 1e-4)
    rest = VECTOR_LAUNCH + "[verify]\ntolerance = { rtol = 1e-3, y = { atol = 0.5 } }\n"
    spec = parse_one(vector_spec(rest=rest))
    assert spec.tolerance == ToleranceSpec(None, 1e-3) and spec.output_tolerances == {"y": ToleranceSpec(0.5)}
    # The per-output table wins entirely; its missing rtol comes from the dtype default.
    assert resolve(spec)[0].tolerances["y"] == Tolerance(0.5, 1e-4)


def test_derived_sizes_follow_the_verify_sizes():
    sizes = '[sizes]\nn = 1024\nhalf_n = "n // 2"\n'
    spec = parse_one(vector_spec(sizes=sizes, rest=VECTOR_LAUNCH + "[verify]\nsizes = [{ n = 100 }]\n"))
    assert complete_sizes(spec, {"n": 100}) == {"n": 100, "half_n": 50}
    assert resolve(spec, {"n": 100})[0].sizes == {"n": 100, "half_n": 50}


def test_resolve_errors_carry_the_location():
    spec = parse_one(vector_spec(rest='[launch]\nblock = [256]\ngrid = ["ceil_div(n, n - 5)"]\n'))
    with pytest.raises(SpecResolveError) as failure:
        resolve(spec, {"n": 5})
    assert failure.value.error.line == 9 and "division by zero" in failure.value.error.message
    with pytest.raises(SpecResolveError) as failure:
        resolve(spec, {"n": 0})
    assert failure.value.error.message == (
        'launch.grid[0] = "ceil_div(n, n - 5)" is 0 with n = 0: a grid dimension must be ≥ 1'
    )
    with pytest.raises(SpecResolveError, match="size n is -1: sizes must be ≥ 0"):
        resolve(spec, {"n": -1})


def test_zeros_init_aliasing_and_scalar_ranges():
    args = VECTOR_ARGS.replace('shape = ["n"] }\nn', 'shape = ["n"], init = "zeros", may_alias = "x" }\nn')
    spec = parse_one(vector_spec(args=args))
    problem, _ = resolve(spec)
    assert problem.arguments[1].distribution == Distribution(kind="value", value=0.0)
    assert problem.arguments[1].may_alias == "x"
    big = the_error(
        vector_spec(
            sizes="[sizes]\nn = 4\nbig = 3_000_000_000\n",
            args=VECTOR_ARGS.replace('value = "n"', 'value = "big"'),
        )
    )
    assert "outside int32's range" in big.message
    init = 'init = { dist = "uniform", low = 2, high = 1 }'
    empty = the_error(
        vector_spec(args=VECTOR_ARGS.replace('shape = ["n"] }', f'shape = ["n"], {init} }}', 1))
    )
    assert "range [low, high) is empty" in empty.message


# --- render ---------------------------------------------------------------------------------------------


def reparse(spec: KernelSpec, kernel: str) -> KernelSpec:
    return parse_one(render_spec(spec) + "\n" + kernel)


def test_render_round_trips_the_full_spec():
    spec = full_spec()
    text = render_spec(spec)
    assert text.startswith("/* cuda-agent\n") and text.endswith("\n*/")
    assert reparse(spec, SOFTMAX_KERNEL) == spec
    assert render_spec(reparse(spec, SOFTMAX_KERNEL)) == text


def test_render_escapes_comment_ends_and_keeps_expressions():
    sizes = '[sizes]\nn = "1 << 10"\n'
    rest = VECTOR_LAUNCH + '[verify]\noracle = { y = "x * 2 */ 1" }\n'  # invalid Python, but tests the escape
    spec = parse_one(vector_spec(sizes=sizes, rest=rest.replace("*/ 1", "")))
    spec = KernelSpec(**{**spec.__dict__, "oracle": {"y": "x */ 1"}})
    text = render_spec(spec)
    assert "*/" not in text[:-2] and 'n = "1 << 10"' in text


# --- expressions ------------------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("text", "message"),
    [
        ("__import__('os')", "unknown function"),
        ("().__class__", "attribute access is not allowed"),
        ("n.__class__", "attribute access is not allowed"),
        ("block.__dict__", "only known in [launch]"),
        ("2 ** 10 ** 9", "too large"),
        ("n ** 100", "too large"),
        ("1 << 100000", "too large"),
        ("n / 2", "use // for integer division"),
        ("n if n else 1", "conditional expressions are not allowed"),
        ("1.5 * n", "not an integer"),
        ("lambda: 1", "lambdas are not allowed"),
        ("[n for n in ()]", "'ListComp'"),
        ("min(n)", "at least two"),
        ("ceil_div(n)", "two arguments"),
        ("blockDim.x", "write block.x"),
    ],
)
def test_safe_expressions_refuse(text: str, message: str):
    with pytest.raises(ExpressionError, match=message.replace("(", r"\(").replace("[", r"\[")):
        parse_expression(text, ["n"]).evaluate({"n": 3})


def test_bitwise_operators_round_sizes_up_as_host_code_does():
    assert parse_expression("(V + 63) & ~63", ["V"]).evaluate({"V": 50257}) == 50304
    assert parse_expression("(n | 1) ^ 2", ["n"]).evaluate({"n": 8}) == 11
    with pytest.raises(ExpressionError, match="bitwise operations take integers"):
        parse_real_expression("x & 1", ["x"]).evaluate_real({"x": 1.5})


def test_expression_functions_block_and_errors_at_evaluation():
    expression = parse_expression(
        " ceil_div(n, block.x) + max(n, 2, 7) - cdiv(-7, 2) % 5", ["n"], allow_block=True
    )
    assert expression.names == {"n", "block.x"}
    assert expression.evaluate({"n": 1000, "block.x": 256}) == 4 + 1000 - (-3 % 5)
    with pytest.raises(ExpressionError) as failure:
        parse_expression("n // (n - 3)", ["n"]).evaluate({"n": 3})
    assert (failure.value.start, failure.value.end) == (0, 12) and "division by zero" in failure.value.message


_small = st.integers(min_value=-50, max_value=50)


@st.composite
def integer_expressions(draw: st.DrawFn, depth: int = 3) -> str:
    if depth == 0 or draw(st.booleans()):
        return draw(st.sampled_from(["a", "b", str(draw(_small))]))
    if draw(st.integers(0, 5)) == 0:
        return f"-({draw(integer_expressions(depth - 1))})"
    if draw(st.integers(0, 9)) == 0:
        return f"~({draw(integer_expressions(depth - 1))})"
    operator = draw(st.sampled_from(["+", "-", "*", "//", "%", "**", "<<", ">>", "&", "|", "^"]))
    left, right = draw(integer_expressions(depth - 1)), draw(integer_expressions(depth - 1))
    if operator in ("**", "<<"):
        # A literal right side keeps the reference (Python itself) from computing 50 ** 50 ** 50 forever;
        # negative and past-int64 values still come up.
        right = str(draw(st.integers(-2, 70)))
    return f"({left}) {operator} ({right})"


@settings(max_examples=400, deadline=None)
@given(text=integer_expressions(), a=_small, b=_small)
def test_expressions_agree_with_python_integer_arithmetic(text: str, a: int, b: int):
    expression = parse_expression(text, ["a", "b"])
    try:
        # The reference: Python itself, on this generated (trusted) arithmetic.
        expected = eval(compile(ast.parse(text, mode="eval"), "<expr>", "eval"), {"a": a, "b": b})
    except (ZeroDivisionError, ValueError, OverflowError, TypeError):
        expected = None
    if isinstance(expected, float) or (isinstance(expected, int) and abs(expected) >= 2**63):
        expected = None  # a negative power is not an integer; beyond int64 is refused by design
    if expected is None:
        with pytest.raises(ExpressionError):
            expression.evaluate({"a": a, "b": b})
        return
    try:
        assert expression.evaluate({"a": a, "b": b}) == expected
    except ExpressionError as error:
        # Refused only for an intermediate result beyond int64 that Python could still handle.
        assert "too large" in error.message


@pytest.mark.parametrize(
    ("oracle", "message"),
    [
        ("x.__class__.__bases__", "attributes starting with '_'"),
        ("torch.load('/etc/passwd')", "'.load' is not allowed"),
        ("torch.hub.list('a')", "'.hub' is not allowed"),
        ("open('f').read()", "unknown name 'open'"),
        ("(lambda: x)()", "lambdas are not allowed"),
        ("[v for v in x]", "comprehensions are not allowed"),
        ("x ** (10 ** 9)", "must be a number literal"),
        ("'a' * 100", "repeating a sequence"),
        ("torch.set_default_dtype(torch.float64)", "'.set_default_dtype' is not allowed"),
        ("x +", "not a valid Python expression"),
    ],
)
def test_oracle_refusals(oracle: str, message: str):
    error = validate_oracle(oracle, ["x", "y", "n"])
    assert error is not None and message in error.message


def test_oracle_accepts_ordinary_pytorch():
    for oracle in [
        "torch.softmax(x, dim=-1)",
        "F.relu(x) ** 2",
        "x.sum().reshape(1)",
        "x[:, :n].T @ y",
        "torch.where(x > 0, x, 0.1 * x)",
        "x * math.sqrt(2.0)",
    ]:
        assert validate_oracle(oracle, ["x", "y", "n"]) is None, oracle


def test_limits_that_only_show_when_evaluated_are_errors_at_parse_time():
    launch = '[launch]\nblock = [32, 8]\ngrid = ["ceil_div(n, block.x)", "n"]\n'
    source = vector_spec(sizes="[sizes]\nn = 100000\n", rest=launch)
    error = the_error(source)
    assert error.line == 9 and pointed(source, error) == '"n"'
    assert error.message == "grid.y = 100000 is more than CUDA's limit 65535"


def test_the_readme_example_parses():
    readme = (Path(__file__).parent.parent / "agent" / "spec" / "README.md").read_text(encoding="utf-8")
    example = readme.split("```cuda\n", 1)[1].split("```", 1)[0].replace("{ ... }", "{ }")
    spec = parse_one(example)
    assert spec.kernel == "softmax" and spec.launch.block == (32, 8)


def test_rewriting_the_block_span_keeps_the_rest_of_the_file():
    source = FULL_SPEC + SOFTMAX_KERNEL
    span = full_spec().block_span
    assert span is not None
    data = source.encode()
    rewritten = (data[: span.start_byte] + b"[64, 4]" + data[span.end_byte :]).decode()
    assert parse_one(rewritten) == replace(full_spec(), launch=replace(full_spec().launch, block=(64, 4)))


def test_explicit_specialisation_and_namespaced_template():
    special = "template <> __global__ void scale<float>(const float* x, float* y, int n) { }\n"
    spec = parse_one(vector_spec().replace(VECTOR_KERNEL, special))
    assert spec.instantiate == "scale<float>"
    namespaced = (
        "namespace ops {\ntemplate <typename T>\n__global__ void scale(const T* x, T* y, int n) { }\n}\n"
    )
    toml = (
        f'instantiate = "ops::scale<double>"\n[sizes]\nn = 8\n[args]\n{VECTOR_ARGS.replace("float32", "f64")}'
    )
    spec = parse_one(vector_file(toml + VECTOR_LAUNCH, namespaced))
    assert spec.instantiate == "ops::scale<double>" and spec.arguments[0].dtype == "float64"


_FRAGMENTS = [
    *'[]{}"=,.#\n *-/019xé<>()',
    "rows",
    "block.x",
    "dtype",
    '""',
    "[[verify.sizes]]",
    "1e400",
    "true",
]


@settings(max_examples=300, deadline=None)
@given(
    edits=st.lists(
        st.tuples(st.integers(14, 800), st.integers(0, 4), st.sampled_from(_FRAGMENTS)), max_size=4
    )
)
def test_a_mangled_spec_never_crashes_and_what_parses_round_trips(edits: list[tuple[int, int, str]]):
    # The editor re-reads the spec on every keystroke: half-typed text must give errors, never exceptions.
    body = FULL_SPEC[: FULL_SPEC.index("*/")]
    for position, deleted, inserted in edits:
        body = body[:position] + inserted + body[position + deleted :]
    source = body + "*/\n" + SOFTMAX_KERNEL
    specs, errors = parse(source)
    assert all((e.line, e.column) <= (e.end_line, e.end_column) for e in errors)
    for spec in specs.values():
        for sizes in (None, *spec.verify_sizes):
            resolve(spec, sizes)
        assert reparse(spec, SOFTMAX_KERNEL) == spec


def test_the_plausibility_floor_counts_only_what_every_correct_kernel_moves() -> None:
    """A gather reads only the rows of its table that the tokens pick: counting the table whole made an
    honest embedding kernel 'faster than physics' and every candidate was rejected. Without a written
    `bytes`, the floor is the outputs written once; with one, the author's count."""
    source = textwrap.dedent(
        """\
        /* cuda-agent
        [sizes]
        n = 1024
        vocab = 50000
        dim = 768
        [args]
        table = { role = "input", dtype = "float32", shape = ["vocab", "dim"] }
        tokens = { role = "input", dtype = "int32", shape = ["n"] }
        out = { role = "output", dtype = "float32", shape = ["n", "dim"] }
        n = { role = "scalar", dtype = "int32", value = "n" }
        [launch]
        block = [256]
        grid = ["n"]
        */
        __global__ void gather(const float* table, const int* tokens, float* out, int n) {}
        """
    )
    problem, _ = resolve(parse_one(source))
    assert problem.bytes_moved == (50000 * 768 + 1024 + 1024 * 768) * 4  # the roofline's estimate
    assert problem.floor_bytes == 1024 * 768 * 4
    written = resolve(parse_one(source.replace("[launch]", '[roofline]\nbytes = "n * dim * 8"\n[launch]')))[0]
    assert written.floor_bytes == written.bytes_moved == 1024 * 768 * 8
