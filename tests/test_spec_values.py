"""Spec values: real expressions for float scalars and float inits, integer ones everywhere else, sizes
of 0, and messages that quote the value and say what is wrong with it, at its spot in the .cu file."""

from __future__ import annotations

import ast
import math

import pytest
from cuda_agent.agent.spec import ExpressionError, InitSpec, SpecResolveError, parse_real_expression, resolve
from cuda_agent.sandbox.plan import Distribution
from hypothesis import given, settings
from hypothesis import strategies as st

from tests.test_spec import VECTOR_ARGS, parse_one, pointed, the_error, vector_file

SCALE_KERNEL = "__global__ void scale(const float* x, float* y, float s, int n) { }\n"
LAUNCH = '[launch]\nblock = [256]\ngrid = ["ceil_div(n, block.x)"]\n'


def scale_spec(s: str, sizes: str = "n = 1000\n", args: str = VECTOR_ARGS) -> str:
    """The scale kernel with `s = { ... s }` as its float scalar's entry."""
    return vector_file(f"[sizes]\n{sizes}[args]\n{args}s = {{ {s} }}\n{LAUNCH}", SCALE_KERNEL)


def value_of_s(source: str, sizes: dict[str, int] | None = None) -> float:
    problem, _ = resolve(parse_one(source), sizes)
    (s,) = [a for a in problem.arguments if a.name == "s"]
    assert s.distribution.kind == "value"
    return s.distribution.value  # type: ignore[return-value]


# --- float scalars: real expressions --------------------------------------------------------------------


@pytest.mark.parametrize(
    ("value", "expected"),
    [
        ('"1 - 0.9 ** 10"', 1 - 0.9**10),
        ('"1 / sqrt(64)"', 0.125),
        ('"1.0 / n"', 0.001),
        ('"0.5 * n"', 500.0),
        ('"n / 8"', 125.0),  # `/` is true division here
        ('"exp(log(2.5))"', 2.5),
        ('"pi / 4"', 0.7853981633974483),
        ('"max(0.5, 1 / n)"', 0.5),
        ("0.25", 0.25),
        ("3", 3.0),
    ],
)
def test_a_float_scalar_value_may_be_a_real_expression(value: str, expected: float):
    assert value_of_s(scale_spec(f"value = {value}")) == pytest.approx(expected)


def test_a_real_value_follows_the_sizes_at_each_point():
    source = scale_spec('value = "1.0 / n"')
    assert value_of_s(source, {"n": 4}) == 0.25
    spec = parse_one(source)
    assert spec.arguments[2].value == "1.0 / n"  # kept as written, rendered back as written


@pytest.mark.parametrize(
    ("value", "message", "token"),
    [
        ('"1 / 0"', 's = "1 / 0": division by zero', "1 / 0"),
        (
            '"2 + 1 / (n - 1000)"',
            "s = \"2 + 1 / (n - 1000)\": division by zero in '1 / (n - 1000)'",
            "1 / (n - 1000)",
        ),
        ('"log(0)"', 's = "log(0)": logarithm of 0, not a positive number', "log(0)"),
        ('"sqrt(-1)"', 's = "sqrt(-1)": square root of a negative number (-1)', "sqrt(-1)"),
        (
            '"(-8) ** (1 / 3)"',
            's = "(-8) ** (1 / 3)": a negative number to a fractional power',
            "(-8) ** (1 / 3)",
        ),
        ('"exp(1000)"', 's = "exp(1000)": too large', "exp(1000)"),
        ('"math.sqrt(2)"', "s = \"math.sqrt(2)\": write sqrt(...) without 'math.'", "math.sqrt"),
        ('"x * 2"', "s = \"x * 2\": unknown size 'x' (sizes are: n)", "x"),
        (
            '"floor(n)"',
            's = "floor(n)": unknown function: use one of ceil_div, cdiv, min, max, sqrt, exp',
            "floor",
        ),
        ('"sqrt(1, 2)"', 's = "sqrt(1, 2)": sqrt(x) takes one argument', "sqrt(1, 2)"),
        ('"1.5 << 2"', 's = "1.5 << 2": shifts take integers', "1.5 << 2"),
    ],
)
def test_a_real_value_that_cannot_be_computed_says_why_at_its_token(value: str, message: str, token: str):
    source = scale_spec(f"value = {value}")
    error = the_error(source)
    assert error.message.startswith(message)
    assert error.line == 7 and pointed(source, error) == token


def test_non_finite_toml_floats_are_refused():
    source = scale_spec("value = inf")
    error = the_error(source)
    assert error.message == "s is inf: it must be a finite number" and pointed(source, error) == "inf"


def test_integer_scalars_stay_integer_expressions_with_the_reason():
    source = scale_spec("value = 1.5", args=VECTOR_ARGS.replace('value = "n"', 'value = "n / 2"'))
    error = the_error(source)
    assert (
        error.message
        == 'n = "n / 2": n is int32, an integer: use // for integer division or ceil_div(a, b), not /'
    )
    assert pointed(source, error) == "n / 2"
    half = scale_spec("value = 1.5", args=VECTOR_ARGS.replace('value = "n"', 'value = "0.5 * n"'))
    error = the_error(half)
    assert error.message == 'n = "0.5 * n": 0.5 is not an integer: n is int32, an integer'
    assert pointed(half, error) == "0.5"


def test_sizes_are_integer_expressions_with_the_reason():
    source = scale_spec("value = 1.5", sizes='n = 1000\nrows = "n / 2"\n')
    error = the_error(source)
    assert (
        error.message
        == 'rows = "n / 2": sizes are integers: use // for integer division or ceil_div(a, b), not /'
    )
    assert (error.line, pointed(source, error)) == (3, "n / 2")
    shape = VECTOR_ARGS.replace('shape = ["n"] }', 'shape = ["n / 2"] }', 1)
    error = the_error(scale_spec("value = 1.5", args=shape))
    assert error.message.startswith('x.shape[0] = "n / 2": shapes are integers: use //')


def test_float_init_parameters_may_be_real_expressions():
    init = 'init = { std = "1 / sqrt(n)", mean = "0.5" }'
    args = VECTOR_ARGS.replace('shape = ["n"] }', f'shape = ["n"], {init} }}', 1)
    spec = parse_one(scale_spec("value = 1.5", args=args))
    assert spec.arguments[0].init == InitSpec("normal", mean="0.5", std="1 / sqrt(n)")
    problem, _ = resolve(spec, {"n": 100})
    assert problem.arguments[0].distribution == Distribution("normal", mean=0.5, std=0.1)
    bounds = 'init = { low = "-1 / sqrt(n)", high = "1 / sqrt(n)" }'
    args = VECTOR_ARGS.replace('shape = ["n"] }', f'shape = ["n"], {bounds} }}', 1)
    problem, _ = resolve(parse_one(scale_spec("value = 1.5", args=args)), {"n": 100})
    assert problem.arguments[0].distribution == Distribution("uniform", low=-0.1, high=0.1)


def test_bad_real_init_parameters_say_what_is_wrong():
    args = VECTOR_ARGS.replace('shape = ["n"] }', 'shape = ["n"], init = { std = "1 - 1" } }', 1)
    source = scale_spec("value = 1.5", args=args)
    error = the_error(source)
    assert (
        error.message == 'x.init.std = "1 - 1" is 0.0: std must be > 0'
        and pointed(source, error) == '"1 - 1"'
    )
    integers = 'init = { dist = "integers", high = "n / 2" }'
    args = VECTOR_ARGS.replace('shape = ["n"] }', f'shape = ["n"], {integers} }}', 1)
    error = the_error(scale_spec("value = 1.5", args=args))
    assert error.message.startswith(
        'x.init.high = "n / 2": dist = "integers" draws integers: its bounds are integers'
    )


@pytest.mark.parametrize(
    ("init", "message"),
    [
        ('{ dist = "uniform", mean = 3 }', 'mean applies to dist = "normal", not uniform'),
        (
            '{ dist = "normal", low = 0 }',
            'low applies to dist = "uniform", "integers" or "offsets", not normal',
        ),
    ],
)
def test_an_init_parameter_of_another_distribution_is_pointed_at(init: str, message: str):
    """A parameter the distribution does not take would be silently ignored: it is refused on its key."""
    args = VECTOR_ARGS.replace('shape = ["n"] }', f'shape = ["n"], init = {init} }}', 1)
    error = the_error(scale_spec("value = 1.5", args=args))
    assert error.message == message


def test_real_expressions_directly():
    expression = parse_real_expression(" 2 * pi * r", ["r"])
    assert expression.names == {"r"} and expression.real
    assert expression.evaluate_real({"r": 1}) == pytest.approx(6.283185307179586)
    assert parse_real_expression("n // 3 + 2 ** 100", ["n"]).evaluate_real({"n": 7}) == pytest.approx(
        2.0**100
    )
    with pytest.raises(ExpressionError, match="lambdas are not allowed here: use numbers"):
        parse_real_expression("lambda: 1", [])


# --- sizes of 0 -------------------------------------------------------------------------------------------

PAD_KERNEL = "__global__ void pad(const float* x, float* y, int n, int pad) { }\n"
PAD_ARGS = """\
x = { role = "input", dtype = "float32", shape = ["n + 2 * pad"] }
y = { role = "output", dtype = "float32", shape = ["n"] }
n = { role = "scalar", dtype = "int32", value = "n" }
pad = { role = "scalar", dtype = "int32", value = "pad" }
"""


def pad_spec(
    sizes: str = "n = 1000\npad = 0\n", args: str = PAD_ARGS, rest: str = "", launch: str = LAUNCH
) -> str:
    return vector_file(f"[sizes]\n{sizes}[args]\n{args}{launch}{rest}", PAD_KERNEL)


def test_a_size_may_be_zero():
    spec = parse_one(pad_spec(rest="[verify]\nsizes = [{ n = 7, pad = 0 }, { pad = 3 }]\n"))
    assert spec.sizes == {"n": 1000, "pad": 0}
    problem, _ = resolve(spec)
    assert problem.arguments[0].shape == (1000,) and problem.arguments[3].distribution.value == 0
    assert resolve(spec, spec.verify_sizes[1])[0].arguments[0].shape == (1006,)


def test_negative_sizes_stay_refused():
    source = pad_spec(sizes='n = 1000\npad = "n - 2000"\n')
    error = the_error(source)
    assert error.message == 'pad = "n - 2000" is -1000 with n = 1000: a size must be ≥ 0'
    assert (error.line, pointed(source, error)) == (3, '"n - 2000"')
    negative = the_error(pad_spec(sizes="n = 1000\npad = -1\n"))
    assert negative.message == "pad is -1: a size must be ≥ 0"
    verify = the_error(pad_spec(rest="[verify]\nsizes = [{ pad = -1 }]\n"))
    assert verify.message == "verify sizes are integers ≥ 0, not int -1"


def test_a_buffer_dimension_of_zero_names_the_expression_and_the_sizes():
    args = PAD_ARGS.replace('shape = ["n"] }', 'shape = ["n", "2 * pad"] }')
    source = pad_spec(args=args)
    error = the_error(source)
    assert error.message == 'y.shape[1] = "2 * pad" is 0 with pad = 0: a buffer dimension must be ≥ 1'
    assert (error.line, pointed(source, error)) == (6, '"2 * pad"')
    literal = the_error(pad_spec(args=PAD_ARGS.replace('shape = ["n"] }', "shape = [0] }")))
    assert literal.message == "y.shape[0] is 0: a buffer dimension must be ≥ 1"


def test_a_grid_or_shape_of_zero_at_another_size_names_it():
    source = pad_spec(rest="[verify]\nsizes = [{ n = 0 }]\n")
    error = the_error(source)
    assert error.message == (
        'at verify sizes n=0: launch.grid[0] = "ceil_div(n, block.x)" is 0 with n = 0, block.x = 256: '
        "a grid dimension must be ≥ 1"
    )
    assert pointed(source, error) == "{ n = 0 }"
    spec = parse_one(pad_spec(launch='[launch]\nblock = [256]\ngrid = ["ceil_div(n + pad, block.x)"]\n'))
    with pytest.raises(SpecResolveError) as failure:
        resolve(spec, {"n": 0, "pad": 1})
    assert failure.value.error.message == 'y.shape[0] = "n" is 0 with n = 0: a buffer dimension must be ≥ 1'
    assert failure.value.error.line == 6


_numbers = st.one_of(st.integers(-20, 20), st.floats(-20, 20, allow_nan=False).map(lambda v: round(v, 3)))


@st.composite
def real_expressions(draw: st.DrawFn, depth: int = 3) -> str:
    if depth == 0 or draw(st.booleans()):
        return draw(st.sampled_from(["a", "b", repr(draw(_numbers))]))
    if draw(st.integers(0, 5)) == 0:
        return f"-({draw(real_expressions(depth - 1))})"
    operator = draw(st.sampled_from(["+", "-", "*", "/", "//", "%", "**"]))
    left, right = draw(real_expressions(depth - 1)), draw(real_expressions(depth - 1))
    if operator == "**":
        right = str(draw(st.integers(-3, 3)))  # keeps the reference (Python itself) quick
    return f"({left}) {operator} ({right})"


@settings(max_examples=300, deadline=None)
@given(text=real_expressions(), a=st.integers(0, 50), b=st.integers(1, 50))
def test_real_expressions_agree_with_python_arithmetic(text: str, a: int, b: int):
    expression = parse_real_expression(text, ["a", "b"])
    try:
        # The reference: Python itself, on this generated (trusted) arithmetic.
        expected = eval(compile(ast.parse(text, mode="eval"), "<expr>", "eval"), {"a": a, "b": b})
        expected = float(expected)
    except (ZeroDivisionError, OverflowError, TypeError):
        expected = None
    if expected is None or not math.isfinite(expected):
        with pytest.raises(ExpressionError):
            expression.evaluate_real({"a": a, "b": b})
        return
    assert expression.evaluate_real({"a": a, "b": b}) == pytest.approx(expected, rel=1e-12, abs=1e-12)
