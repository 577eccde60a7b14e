"""Names inside an oracle (torch, math and F are the modules; an argument F is F_, an argument in is in_),
[verify.intermediates], and outputs left out of the oracle: what the spec checker accepts, the errors at
their spots in the .cu file, and what resolve, render and inference make of them."""

from __future__ import annotations

from dataclasses import replace
from pathlib import Path

import pytest
from cuda_agent.agent.kernels import find_kernels
from cuda_agent.agent.spec import infer_spec, render_spec, resolve, validate_oracle
from cuda_agent.sandbox.oracle_names import oracle_spelling

from tests.test_spec import errors_of, parse, parse_one, pointed, the_error, vector_file

CONV_KERNEL = "__global__ void conv(const float* x, const float* F, const float* in, float* y, int n) { }\n"
CONV_ARGS = """\
x = { role = "input", dtype = "float32", shape = ["n"] }
F = { role = "input", dtype = "float32", shape = ["k"] }
in = { role = "input", dtype = "float32", shape = ["n"] }
y = { role = "output", dtype = "float32", shape = ["n"] }
n = { role = "scalar", dtype = "int32", value = "n" }
"""
LAUNCH = '[launch]\nblock = [256]\ngrid = ["ceil_div(n, block.x)"]\n'
ORACLE_LINE = 14  # the line of `oracle = ...` in conv_spec's file


def conv_spec(verify: str, args: str = CONV_ARGS, kernel: str = CONV_KERNEL) -> str:
    return vector_file(f"[sizes]\nn = 1000\nk = 3\n[args]\n{args}{LAUNCH}[verify]\n{verify}", kernel)


# --- names in an oracle ---------------------------------------------------------------------------------


def test_arguments_named_like_a_module_or_a_keyword_are_written_with_an_underscore():
    oracle = "F.conv1d(x.view(1, 1, -1), F_.view(1, 1, -1), padding=1).view(-1) + in_"
    spec = parse_one(conv_spec(f'oracle = {{ y = "{oracle}" }}\n'))
    assert resolve(spec)[0].oracle == {"y": oracle}  # the worker spells the names the same way
    assert [oracle_spelling(name) for name in ("x", "F", "in", "lambda", "torch")] == [
        "x",
        "F_",
        "in_",
        "lambda_",
        "torch_",
    ]


def test_f_dot_a_tensor_method_beside_an_argument_f_meant_the_argument():
    """`F.view(...)` for the filter passed the spec check and failed on the GPU ("'Tensor' object has no
    attribute 'conv1d'"); now the spec check says so at the spot."""
    source = conv_spec('oracle = { y = "F.conv1d(x.view(1, 1, -1), F.view(1, 1, -1)).view(-1)" }\n')
    error = the_error(source)
    assert error.message == (
        "F in an oracle is torch.nn.functional, which has no 'view': write F_.view for the argument F"
    )
    assert pointed(source, error) == "F.view"
    assert validate_oracle("F.view(x)", ["x"]) is None  # no argument F: left to torch to say


def test_the_oracles_python_builtins_are_known_names():
    assert validate_oracle("x.masked_fill(x > 0, float('-inf')) + max(n, 2) + abs(-1)", ["x", "n"]) is None
    error = validate_oracle("open('f')", ["x"])
    assert error is not None and error.message.startswith("unknown name 'open'")
    assert "Python's abs, bool, float" in error.message


def test_a_bare_module_name_where_an_argument_has_it_says_to_write_the_underscore():
    source = conv_spec('oracle = { y = "x * F + in_" }\n')
    error = the_error(source)
    assert error.message == "'F' in an oracle is torch.nn.functional: write F_ for the argument F"
    assert (error.line, error.column) == (ORACLE_LINE, 20) and pointed(source, error) == "F"
    # Without an argument F, F is just the module (and F.relu is fine with one).
    assert validate_oracle("F.relu(x) * 2", ["x", "F"]) is None
    torch_error = validate_oracle("torch + 1", ["x", "torch"])
    assert torch_error is not None
    assert (
        torch_error.message == "'torch' in an oracle is the torch module: write torch_ for the argument torch"
    )


def test_a_keyword_argument_written_bare_is_a_syntax_error_with_the_spelling():
    source = conv_spec('oracle = { y = "x + in" }\n')
    error = the_error(source)
    assert error.message == (
        "not a valid Python expression: invalid syntax; the argument `in` is written `in_` in an oracle"
    )
    assert (error.line, pointed(source, error)) == (ORACLE_LINE, "i")
    # A syntax error that has nothing to do with `in` gets no hint.
    other = the_error(conv_spec('oracle = { y = "x + in_ +" }\n'))
    assert other.message == "not a valid Python expression: invalid syntax"


def test_the_plain_name_of_a_respelled_argument_is_unknown():
    error = the_error(conv_spec('oracle = { y = "x + F_ + z" }\n'))
    assert error.message == (
        "unknown name 'z' (an oracle may use: x, F_, in_, y, n, k, torch, math, F, and Python's abs, bool, "
        "float, int, len, max, min, round, slice, sum, tuple)"
    )


def test_two_names_an_oracle_writes_alike_are_refused_on_the_argument():
    kernel = "__global__ void conv(const float* x, const float* F, const float* F_, float* y, int n) { }\n"
    args = CONV_ARGS.replace("in = {", "F_ = {")
    source = conv_spec('oracle = { y = "x + F_" }\n', args=args, kernel=kernel)
    error = the_error(source)
    assert error.message == (
        "argument 'F' is written F_ in an oracle (F there is torch.nn.functional), the same as "
        "argument 'F_': rename one of the two"
    )
    assert (error.line, pointed(source, error)) == (6, "F")
    # A size spelled like a respelled argument, too; without an oracle the names never meet.
    sized = vector_file(
        f'[sizes]\nn = 1000\nk = 3\nin_ = 4\n[args]\n{CONV_ARGS}{LAUNCH}[verify]\noracle = {{ y = "x" }}\n',
        CONV_KERNEL,
    )
    assert "argument 'in' is written in_ in an oracle (a Python keyword), the same as size 'in_'" in (
        the_error(sized).message
    )
    parse_one(source.replace('oracle = { y = "x + F_" }\n', ""))


def test_sizes_cannot_be_named_like_a_module_or_a_keyword():
    keyword_size = the_error(conv_spec("", args=CONV_ARGS).replace("k = 3\n", "k = 3\nfrom = 2\n"))
    assert keyword_size.message == (
        "'from' is a Python keyword, which expressions cannot use: name the size differently"
    )
    reserved = the_error(conv_spec("").replace("k = 3\n", "k = 3\nF = 2\n"))
    assert reserved.message == "'F' is reserved in expressions; name the size differently"


# --- [verify.intermediates] -----------------------------------------------------------------------------

INTERMEDIATES = """\
oracle = { y = "centered / torch.sqrt(variance + 1e-5) * F_.sum()" }
[verify.intermediates]
mean = "x.mean(dim=-1, keepdim=True)"
centered = "x - mean"
variance = "(centered * centered).mean(dim=-1, keepdim=True) + 0 * in_"
"""


def test_intermediates_are_kept_in_order_resolved_and_rendered():
    spec = parse_one(conv_spec(INTERMEDIATES))
    expected = (
        ("mean", "x.mean(dim=-1, keepdim=True)"),
        ("centered", "x - mean"),
        ("variance", "(centered * centered).mean(dim=-1, keepdim=True) + 0 * in_"),
    )
    assert spec.intermediates == expected
    problem, _ = resolve(spec)
    assert problem.oracle_intermediates == expected
    assert problem.oracle == {"y": "centered / torch.sqrt(variance + 1e-5) * F_.sum()"}
    text = render_spec(spec)
    assert '[verify.intermediates]\nmean = "x.mean(dim=-1, keepdim=True)"\ncentered = "x - mean"\n' in text
    again = parse_one(text + "\n" + CONV_KERNEL)
    assert again == spec and render_spec(again) == text


def test_an_intermediate_may_use_only_those_above_it():
    source = conv_spec('oracle = { y = "b" }\n[verify.intermediates]\na = "x + b"\nb = "a * 2"\n')
    error = the_error(source)
    assert (
        error.message == "'b' is defined below this intermediate: an intermediate may use only those above it"
    )
    assert (error.line, error.column) == (ORACLE_LINE + 2, 9) and pointed(source, error) == "b"


def test_an_error_inside_an_intermediate_points_into_its_string():
    source = conv_spec('oracle = { y = "a" }\n[verify.intermediates]\na = "torch.load(\'w.pt\') + x"\n')
    error = the_error(source)
    assert error.message == "'.load' is not allowed in an oracle (it reaches outside computing a tensor)"
    assert (error.line, pointed(source, error)) == (ORACLE_LINE + 2, "torch.load")
    unknown = the_error(conv_spec('oracle = { y = "a + c" }\n[verify.intermediates]\na = "x"\n'))
    assert unknown.message.startswith("unknown name 'c' (an oracle may use: x, F_, in_, y, n, k, a, torch")


@pytest.mark.parametrize(
    ("name", "message"),
    [
        ("x", "'x' is already the argument x: name the intermediate differently"),
        ("F_", "'F_' is already the argument F (written F_ in an oracle): name the intermediate differently"),
        ("n", "'n' is already the argument n: name the intermediate differently"),
        ("k", "'k' is already the size k: name the intermediate differently"),
        ("F", "'F' is torch.nn.functional in an oracle: name the intermediate differently"),
        ("math", "'math' is the math module in an oracle: name the intermediate differently"),
        ("lambda", "'lambda' is a Python keyword: name the intermediate differently"),
        (
            "_hidden",
            "names starting with '_' are not allowed in an oracle: name the intermediate differently",
        ),
        ('"a b"', "intermediate name 'a b' must be an identifier (letters, digits, _)"),
    ],
)
def test_intermediate_names_that_cannot_be_used(name: str, message: str):
    source = conv_spec(f'oracle = {{ y = "x" }}\n[verify.intermediates]\n{name} = "x * 2"\n')
    error = the_error(source)
    assert error.message == message
    assert (error.line, error.column) == (ORACLE_LINE + 2, 0) and pointed(source, error) == name


def test_an_intermediate_is_a_string_and_the_table_is_a_table():
    error = the_error(conv_spec('oracle = { y = "a" }\n[verify.intermediates]\na = 7\n'))
    assert error.message == "an intermediate is a string holding a PyTorch expression, not int 7"
    table = the_error(conv_spec('intermediates = "x"\n'))
    assert table.message.startswith('intermediates is a table of name = "PyTorch expression"')


def test_an_unused_intermediate_and_intermediates_without_an_oracle_are_fine():
    spec = parse_one(conv_spec('[verify.intermediates]\nunused = "x * 2"\n'))
    assert spec.oracle is None and spec.intermediates == (("unused", "x * 2"),)
    assert resolve(spec)[0].oracle_intermediates == (("unused", "x * 2"),)


# --- outputs left out of the oracle ---------------------------------------------------------------------

TWO_OUTPUTS = "__global__ void two(const float* x, float* y, float* z, int n) { }\n"
TWO_ARGS = """\
x = { role = "input", dtype = "float32", shape = ["n"] }
y = { role = "output", dtype = "float32", shape = ["n"] }
z = { role = "output", dtype = "float32", shape = ["n"] }
n = { role = "scalar", dtype = "int32", value = "n" }
"""


def test_an_output_left_out_of_the_oracle_is_accepted_and_stays_out():
    source = vector_file(
        f'[sizes]\nn = 1000\n[args]\n{TWO_ARGS}{LAUNCH}[verify]\noracle = {{ y = "x * 2" }}\n', TWO_OUTPUTS
    )
    spec = parse_one(source)
    problem, _ = resolve(spec)
    assert problem.oracle == {"y": "x * 2"}  # z: compared with the original kernel's
    assert [a.name for a in problem.outputs] == ["y", "z"] and set(problem.tolerances) == {"y", "z"}
    assert render_spec(spec).count("oracle = { y = ") == 1
    # Naming an input is still an error.
    specs, errors = parse(source.replace('{ y = "x * 2" }', '{ y = "x * 2", x = "x" }'))
    assert not specs and [e.message for e in errors] == ["'x' is not an output (outputs: y, z)"]


# --- render and inference with these names --------------------------------------------------------------


def test_render_round_trips_arguments_named_in_and_f_with_their_oracle():
    spec = parse_one(
        conv_spec('oracle = { y = "F.conv1d(in_.view(1, 1, -1), F_.view(1, 1, -1)).view(-1)" }\n')
    )
    text = render_spec(spec)
    assert '\nin = { role = "input"' in text and '\nF = { role = "input"' in text
    assert parse_one(text + "\n" + CONV_KERNEL) == spec


@pytest.mark.parametrize(
    ("parameter", "size"), [("F", "F_size"), ("lambda", "lambda_size"), ("max", "max_size")]
)
def test_inference_names_the_size_of_a_parameter_a_size_cannot_be_called(parameter: str, size: str):
    source = f"""__global__ void twice(const float* in, float* out, int {parameter}) {{
        int i = blockIdx.x * blockDim.x + threadIdx.x;
        if (i < {parameter}) out[i] = in[i] * 2.0f;
    }}"""
    (kernel,) = find_kernels(source)
    spec, note = infer_spec(kernel, source)
    assert spec is not None, note
    assert spec.sizes == {size: 16_777_216} and spec.launch.grid == (f"ceil_div({size}, block.x)",)
    assert spec.argument(parameter).value == size  # type: ignore[union-attr]
    assert [a.shape for a in spec.arguments if a.is_buffer] == [(size,), (size,)]
    rendered = render_spec(spec) + "\n" + source
    assert parse_one(rendered) == replace(spec, inferred=False, inference_note="")


def test_many_name_errors_at_once():
    verify = 'oracle = { y = "x * F" }\n[verify.intermediates]\nx = "1"\na = "in"\n'
    errors = errors_of(conv_spec(verify))
    assert [e.line for e in errors] == [ORACLE_LINE, ORACLE_LINE + 2, ORACLE_LINE + 3]


def test_the_readme_intermediates_example_parses():
    readme = (Path(__file__).parent.parent / "agent" / "spec" / "README.md").read_text(encoding="utf-8")
    verify = readme.split("```toml\n", 1)[1].split("```", 1)[0]
    kernel = "__global__ void norm(const float* x, float* y, float eps, int rows, int cols) { }\n"
    args = """\
x = { role = "input", dtype = "float32", shape = ["rows", "cols"] }
y = { role = "output", dtype = "float32", shape = ["rows", "cols"] }
eps = { role = "scalar", dtype = "float32", value = "1 / 100_000" }
rows = { value = "rows" }
cols = { value = "cols" }
"""
    launch = '[launch]\nblock = [256]\ngrid = ["rows"]\n'
    spec = parse_one(vector_file(f"[sizes]\nrows = 64\ncols = 1000\n[args]\n{args}{launch}{verify}", kernel))
    assert [name for name, _ in spec.intermediates] == ["mean", "centered", "variance"]
    assert resolve(spec)[0].arguments[2].distribution.value == pytest.approx(1e-5)
