"""The spec's PyTorch oracle as one Python function, and the torch it runs on (worker side).

The verifier and the torch timing call the same function: `def reference(x, w): s = ...; return (y,)`,
built from the expressions' syntax trees (never by pasting text), with the named intermediates as
assignments before the return, so Dynamo can trace it too. Names follow sandbox/oracle_names.py: an
argument `F` is the parameter `F_`, an input `in` the parameter `in_`; `torch`, `math`, `F` are modules.

The expressions were checked when the spec was read (agent/spec): only known names, no private
attributes. The function still gets the real builtins module as its builtins: C code that imports
lazily (PyTorch's `masked_fill`, `torch.where` with a Python float, `torch.full`, comparisons with a
float) looks `__import__` up in the calling frame's builtins, and with none it raised
KeyError('__import__') the first time it ran in a process (seen on the H200). Which names an expression
may use is the spec checker's business; `check_names` repeats the essential part here, so a Problem
built by hand cannot reach a builtin the spec format does not offer.

torch is set to full precision before any oracle runs: cuDNN's default lets an fp32 convolution run in
TF32 (max error 0.035 against float64 on the H200 where fp32 gives 1.3e-4), and fp16/bf16 matmuls may
reduce in reduced precision. A reference in lower precision would reject honest fp32 kernels and pass a
kernel that rounds its inputs to TF32.

A tensor the oracle makes itself (`torch.arange(1, n + 1)`, `torch.ones(k)`) is made where the inputs are:
each factory call without a `device=` gets the first input's (torch would make it on the CPU, and the
expression would fail against the GPU's inputs, which a user reads as a broken oracle, not a choice).
"""

from __future__ import annotations

import ast
import builtins
import math
import threading
from collections.abc import Callable, Mapping
from typing import Any

from cuda_agent.sandbox.oracle_names import ORACLE_BUILTINS, ORACLE_MODULES, needs_respelling, oracle_spelling
from cuda_agent.sandbox.plan import Problem

PRECISION_NOTE = "oracle in full precision (TF32 and reduced-precision reductions off)"

_torch: Any = None
_torch_lock = threading.Lock()


def load_torch(device: int) -> Any:
    """Import torch once, in full precision, with its CUDA state made on the worker's GPU. Thread-safe: a
    standby worker loads it in the background while the active one serves, so that a restart after a
    hung kernel does not pay the seconds of the import again on the critical path."""
    global _torch
    with _torch_lock:
        if _torch is None:
            import torch

            full_precision(torch)
            torch.cuda.set_device(device)
            torch.ones(1, device="cuda").add_(1)
            torch.cuda.synchronize()
            _torch = torch
    return _torch


def torch_loaded() -> bool:
    return _torch is not None


def full_precision(torch: Any) -> None:
    """No TF32 and no reduced-precision reductions anywhere an oracle can reach."""
    torch.backends.cuda.matmul.allow_tf32 = False
    torch.backends.cudnn.allow_tf32 = False
    torch.set_float32_matmul_precision("highest")
    torch.backends.cuda.matmul.allow_fp16_reduced_precision_reduction = False
    torch.backends.cuda.matmul.allow_bf16_reduced_precision_reduction = False


class OracleError(Exception):
    """An oracle the worker will not run, or that failed: the message names the output and the cause."""


def oracle_parameters(problem: Problem) -> tuple[str, ...]:
    """The function's parameters, in signature order: the inputs and inouts, as the oracle spells them."""
    return tuple(oracle_spelling(a.name) for a in problem.arguments if a.role in ("input", "inout"))


def constants_of(problem: Problem, scalars: Mapping[str, float | int]) -> dict[str, float | int]:
    """The sizes and scalar arguments by their oracle spelling (a scalar wins over a size of its name)."""
    constants: dict[str, float | int] = {
        oracle_spelling(name): value for name, value in problem.sizes.items()
    }
    constants.update({oracle_spelling(name): value for name, value in scalars.items()})
    return constants


def oracle_function(
    problem: Problem, constants: Mapping[str, float | int], torch: Any
) -> tuple[Callable[..., tuple[Any, ...]], tuple[str, ...]]:
    """The problem's oracle as `reference(*inputs) -> (outputs...)`, and the output names in that order
    (the outputs the oracle gives; the others are checked against the reference kernel)."""
    oracle = problem.oracle or {}
    outputs = tuple(a.name for a in problem.outputs if a.name in oracle)
    if not outputs:
        raise ValueError("the problem has no PyTorch oracle")
    parameters = oracle_parameters(problem)
    known = {*parameters, *constants, *ORACLE_MODULES, *ORACLE_BUILTINS}
    body: list[ast.stmt] = []
    if parameters:  # `_device = x.device`, for the factory calls (`_` names are ours: an oracle's are not)
        device = ast.Attribute(ast.Name(parameters[0], ast.Load()), "device", ast.Load())
        body.append(ast.Assign(targets=[ast.Name(DEVICE, ast.Store())], value=device))
    for name, expression in problem.oracle_intermediates:
        value = _parse(expression, f"intermediate {name}", known)
        body.append(ast.Assign(targets=[ast.Name(name, ast.Store())], value=value))
        known.add(name)
    # Each output through `_written_out`: a kernel writes its output buffer, so an expression that is only
    # a view (`src.T`) must be made to write its result too, or torch would be timed doing nothing.
    results = [
        ast.Call(
            ast.Name("_written_out", ast.Load()), [_parse(oracle[name], f"oracle for {name}", known)], []
        )
        for name in outputs
    ]
    body.append(ast.Return(ast.Tuple(results, ast.Load())))
    function = ast.FunctionDef(
        name="reference",
        args=ast.arguments(
            posonlyargs=[], args=[ast.arg(p) for p in parameters], kwonlyargs=[], kw_defaults=[], defaults=[]
        ),
        body=body,
        decorator_list=[],
        returns=None,
        type_params=[],
    )
    if parameters:
        function = _OnInputsDevice().visit(function)
    module = ast.fix_missing_locations(ast.Module([function], type_ignores=[]))
    namespace: dict[str, Any] = {
        "__builtins__": builtins, "torch": torch, "math": math, "F": torch.nn.functional,
        **constants, "_written_out": _written_out,
    }  # fmt: skip
    exec(compile(module, f"<oracle of {problem.label}>", "exec"), namespace)
    return namespace["reference"], outputs


def _parse(expression: str, what: str, known: set[str]) -> ast.expr:
    try:
        tree = ast.parse(expression.strip(), mode="eval").body
    except SyntaxError as exc:
        raise OracleError(f"{what} ({expression!r}) is not a Python expression: {exc.msg}") from None
    problem = check_names(tree, known)
    if problem:
        raise OracleError(f"{what} ({expression!r}): {problem}")
    return tree


# torch's functions that make a tensor from sizes or values alone, on the CPU unless told otherwise
FACTORIES = frozenset(
    {
        "arange", "ones", "zeros", "full", "empty", "eye", "linspace", "logspace", "tensor", "as_tensor",
        "rand", "randn", "randint", "tril_indices", "triu_indices",
    }
)  # fmt: skip
DEVICE = "_device"


class _OnInputsDevice(ast.NodeTransformer):
    """`torch.arange(1, n + 1)` -> `torch.arange(1, n + 1, device=_device)`, where no device is given."""

    def visit_Call(self, node: ast.Call) -> ast.AST:
        self.generic_visit(node)
        function = node.func
        if (
            isinstance(function, ast.Attribute)
            and isinstance(function.value, ast.Name)
            and function.value.id == "torch"
            and function.attr in FACTORIES
            and not any(keyword.arg == "device" for keyword in node.keywords)
        ):
            node.keywords.append(ast.keyword("device", ast.Name(DEVICE, ast.Load())))
        return node


def check_names(tree: ast.AST, known: set[str]) -> str | None:
    """The part of the spec checker's rules that keeps an oracle inside torch: every name is one it was
    given, and no name or attribute is private (`__class__`, `_C`)."""
    for node in ast.walk(tree):
        if isinstance(node, ast.Name) and (node.id not in known or node.id.startswith("_")):
            return f"unknown name {node.id!r}"
        if isinstance(node, ast.Attribute) and node.attr.startswith("_"):
            return f"private attribute {node.attr!r}"
        if isinstance(node, (ast.Lambda, ast.NamedExpr)) or (
            isinstance(node, ast.Name) and isinstance(node.ctx, ast.Store)
        ):
            return "only an expression may be given"
    return None


def _written_out(value: Any) -> Any:
    """A tensor as a contiguous tensor of its own (a copy only when it is a strided view, as `.T` is)."""
    return value.contiguous()


def respelling_hint(problem: Problem) -> str:
    """What to add to an oracle's error when an argument or size is spelled differently inside it."""
    respelled = [
        name for name in (*(a.name for a in problem.arguments), *problem.sizes) if needs_respelling(name)
    ]
    if not respelled:
        return ""
    shown = ", ".join(f"{name} is {oracle_spelling(name)}" for name in dict.fromkeys(respelled))
    return (
        f" (inside an oracle, {shown}; torch, math and F are always the modules, F being torch.nn.functional)"
    )
