"""The oracle as the worker evaluates it (sandbox/oracle.py): names as the spec spells them, named
intermediates, the builtins an expression may call, what is refused; and the forms people write, each in a
fresh Python process with real torch on the CPU (the worker's first evaluation in a process used to fail
for `masked_fill(mask, -math.inf)`, `torch.where(m, x, 0.0)`, `torch.full`: KeyError('__import__'))."""

from __future__ import annotations

import json
import subprocess
import sys
import textwrap
import types
from importlib.util import find_spec

import numpy as np
import pytest
from cuda_agent.sandbox.oracle import (
    OracleError,
    constants_of,
    full_precision,
    oracle_function,
    oracle_parameters,
    respelling_hint,
)
from cuda_agent.sandbox.oracle_names import oracle_spelling
from cuda_agent.sandbox.plan import ArgumentPlan, Distribution, Problem, Tolerance

FAKE_TORCH = types.SimpleNamespace(nn=types.SimpleNamespace(functional=types.SimpleNamespace()))


class Array(np.ndarray):
    """A NumPy array with torch's `.contiguous()`, which the oracle function calls on every output."""

    def contiguous(self) -> Array:
        return self


def conv_problem(oracle: dict[str, str], intermediates: tuple[tuple[str, str], ...] = ()) -> Problem:
    """A 1-D convolution whose parameters are named as CUDA code names them: `in` and a filter `F`."""
    arguments = (
        ArgumentPlan("in", "input", "float32", (8,)),
        ArgumentPlan("F", "input", "float32", (3,)),
        ArgumentPlan("out", "output", "float32", (6,)),
        ArgumentPlan("lambda", "scalar", "float32", (), Distribution("value", value=2.0)),
    )
    return Problem("n=8", {"n": 8, "k": 3}, arguments, {"out": Tolerance.default("float32")}, oracle,
                   oracle_intermediates=intermediates)  # fmt: skip


def test_arguments_named_like_keywords_or_modules_are_spelled_with_an_underscore() -> None:
    assert [oracle_spelling(n) for n in ("in", "F", "torch", "math", "lambda", "x", "F_")] == [
        "in_", "F_", "torch_", "math_", "lambda_", "x", "F_",
    ]  # fmt: skip
    problem = conv_problem({"out": "in_[:6] * F_[0] * lambda_ + k"})
    assert oracle_parameters(problem) == ("in_", "F_")
    constants = constants_of(problem, {"lambda": 2.0})
    assert constants == {"n": 8, "k": 3, "lambda_": 2.0}
    function, outputs = oracle_function(problem, constants, FAKE_TORCH)
    assert outputs == ("out",)
    signal, taps = np.arange(8.0).view(Array), np.array([0.5, 1.0, 2.0]).view(Array)
    (result,) = function(signal, taps)
    np.testing.assert_array_equal(result, np.arange(6.0) * 0.5 * 2.0 + 3)


def test_f_stays_torch_nn_functional_beside_an_argument_named_f() -> None:
    functional = types.SimpleNamespace(double=lambda v: 2 * v)
    torch = types.SimpleNamespace(nn=types.SimpleNamespace(functional=functional))
    function, _ = oracle_function(conv_problem({"out": "F.double(F_)"}), {}, torch)
    (result,) = function(np.zeros(8).view(Array), np.array([1.0, 2.0, 3.0]).view(Array))
    np.testing.assert_array_equal(result, [2.0, 4.0, 6.0])


def test_intermediates_are_evaluated_in_order_and_used_by_the_oracle() -> None:
    problem = conv_problem(
        {"out": "scaled + shifted"},
        intermediates=(("scaled", "in_[:6] * 2"), ("shifted", "scaled + k")),
    )
    function, _ = oracle_function(problem, constants_of(problem, {"lambda": 1.0}), FAKE_TORCH)
    (result,) = function(np.arange(8.0).view(Array), np.zeros(3).view(Array))
    np.testing.assert_array_equal(result, np.arange(6.0) * 4 + 3)


def test_safe_builtins_are_callable() -> None:
    problem = conv_problem({"out": "in_[slice(0, 6)] * 0 + max(float('-inf'), abs(-2.0), len(F_))"})
    function, _ = oracle_function(problem, {}, FAKE_TORCH)
    (result,) = function(np.zeros(8).view(Array), np.zeros(3).view(Array))
    np.testing.assert_array_equal(result, np.full(6, 3.0))


@pytest.mark.parametrize(
    ("expression", "message"),
    [
        ("open('/etc/passwd')", "unknown name 'open'"),
        ("__import__('os')", "unknown name '__import__'"),
        ("in_.__class__", "private attribute '__class__'"),
        ("torch._C", "private attribute '_C'"),
        ("(lambda: 1)()", "only an expression"),
        ("(y := in_)", "only an expression"),
        ("in", "is not a Python expression"),
        ("scaled * 2", "unknown name 'scaled'"),  # an intermediate that was never defined
    ],
)
def test_names_the_oracle_was_not_given_are_refused(expression: str, message: str) -> None:
    with pytest.raises(OracleError, match=message):
        oracle_function(conv_problem({"out": expression}), {}, FAKE_TORCH)


def test_an_intermediate_may_not_use_one_defined_after_it() -> None:
    problem = conv_problem({"out": "b"}, intermediates=(("a", "b + 1"), ("b", "in_")))
    with pytest.raises(OracleError, match=r"intermediate a .*unknown name 'b'"):
        oracle_function(problem, {}, FAKE_TORCH)


def test_an_oracle_error_explains_the_spelling_of_respelled_names() -> None:
    hint = respelling_hint(conv_problem({"out": "in_"}))
    assert "in is in_" in hint and "F is F_" in hint and "lambda is lambda_" in hint
    plain = Problem("n=4", {"n": 4}, (ArgumentPlan("x", "input", "float32", (4,)),), {}, {"x": "x"})
    assert respelling_hint(plain) == ""


# -- real torch, each form in a fresh process --------------------------------------------------------------

needs_torch = pytest.mark.skipif(
    find_spec("torch") is None, reason="torch is not installed (.ci/run installs the CPU build)"
)

# What people write in oracles: masks with -inf, where/full/tensor with Python numbers, comparisons with
# floats, reductions with their index, an einsum, and the spelled names. Each must work the first time it
# runs in a process.
FORMS = [
    "x.masked_fill(x > 0, -math.inf)",
    "torch.where(x > 0, x, 0.0)",
    "torch.full(x.shape, 2.0) + x",
    "torch.tensor([1.0, 2.0, 3.0, 4.0]).repeat(2) * x",
    "(x > 0.5).float() * x",
    "x.masked_fill(torch.ones(8, 8, dtype=torch.bool).triu(1)[0], float('-inf'))",
    "torch.argmax(x.view(2, 4), dim=-1).repeat(4).float()",
    "torch.einsum('i,i->i', x, x)",
    "F.gelu(x)",
    "torch.cumsum(x, 0)",
    "x.sort().values",
    "torch.clamp(x.to(torch.int64) * 3 // 2, max=255).float()",
    "F.pad(F.conv1d(x.view(1, 1, -1), F_.view(1, 1, -1)).view(-1), (0, 2))",
    "scores.softmax(-1)",
]

_FRESH = textwrap.dedent(
    """
    import json, sys
    import torch
    from cuda_agent.sandbox.oracle import constants_of, full_precision, oracle_function
    from cuda_agent.sandbox.plan import ArgumentPlan, Problem

    expression = sys.argv[1]
    full_precision(torch)
    arguments = (
        ArgumentPlan("x", "input", "float32", (8,)),
        ArgumentPlan("F", "input", "float32", (3,)),
        ArgumentPlan("y", "output", "float32", (8,)),
    )
    problem = Problem("n=8", {"n": 8}, arguments, {}, {"y": expression},
                      oracle_intermediates=(("scores", "x * 2"),))
    function, _ = oracle_function(problem, constants_of(problem, {}), torch)
    (value,) = function(torch.randn(8), torch.randn(3))
    print(json.dumps({"shape": list(torch.as_tensor(value).shape),
                      "tf32": torch.backends.cudnn.allow_tf32 or torch.backends.cuda.matmul.allow_tf32}))
    """
)


@needs_torch
@pytest.mark.parametrize("expression", FORMS)
def test_each_oracle_form_works_the_first_time_in_a_fresh_process(expression: str) -> None:
    done = subprocess.run(
        [sys.executable, "-c", _FRESH, expression], capture_output=True, text=True, timeout=120, check=False
    )
    assert done.returncode == 0, done.stderr[-2000:]
    answer = json.loads(done.stdout.strip().splitlines()[-1])
    assert answer["shape"] == [8]
    assert answer["tf32"] is False


@needs_torch
def test_full_precision_turns_off_tf32_and_reduced_precision_reductions() -> None:
    import torch

    saved = (
        torch.backends.cudnn.allow_tf32, torch.backends.cuda.matmul.allow_tf32,
        torch.get_float32_matmul_precision(),
        torch.backends.cuda.matmul.allow_fp16_reduced_precision_reduction,
        torch.backends.cuda.matmul.allow_bf16_reduced_precision_reduction,
    )  # fmt: skip
    try:
        torch.backends.cudnn.allow_tf32 = True  # PyTorch's default for convolutions
        full_precision(torch)
        assert not torch.backends.cudnn.allow_tf32 and not torch.backends.cuda.matmul.allow_tf32
        assert torch.get_float32_matmul_precision() == "highest"
        assert not torch.backends.cuda.matmul.allow_fp16_reduced_precision_reduction
        assert not torch.backends.cuda.matmul.allow_bf16_reduced_precision_reduction
    finally:
        torch.backends.cudnn.allow_tf32, torch.backends.cuda.matmul.allow_tf32 = saved[0], saved[1]
        torch.set_float32_matmul_precision(saved[2])
        torch.backends.cuda.matmul.allow_fp16_reduced_precision_reduction = saved[3]
        torch.backends.cuda.matmul.allow_bf16_reduced_precision_reduction = saved[4]


@needs_torch
@pytest.mark.parametrize(
    "expression",
    [
        "torch.cumsum(x, 0) / torch.arange(1, n + 1)",  # a running mean
        "x * torch.ones(n) + torch.zeros(n, dtype=torch.float32)",
        "x + torch.linspace(0, 1, n) + torch.tensor([2.0]).expand(n)",
        "torch.eye(n)[0] * x",
    ],
)
def test_tensors_the_oracle_makes_are_made_where_its_inputs_are(expression: str) -> None:
    """On the GPU an oracle's own `torch.arange(...)` would be a CPU tensor beside CUDA inputs and the
    expression would fail; it is made on the inputs' device (here the meta device: any but the CPU)."""
    import torch

    arguments = (ArgumentPlan("x", "input", "float32", (8,)), ArgumentPlan("y", "output", "float32", (8,)))
    problem = Problem("n=8", {"n": 8}, arguments, {}, {"y": expression})
    function, _ = oracle_function(problem, constants_of(problem, {}), torch)
    (value,) = function(torch.empty(8, device="meta"))
    assert value.device.type == "meta" and value.shape == (8,)
    # a device the oracle names stays its own
    named = {"y": "x.cpu() + torch.ones(n, device='cpu')"}
    function, _ = oracle_function(Problem("n=8", {"n": 8}, arguments, {}, named), {"n": 8}, torch)
    assert function(torch.ones(8))[0].device.type == "cpu"
