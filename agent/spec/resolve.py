"""Evaluate a KernelSpec at one size point and block shape: the sandbox's concrete Problem and LaunchPlan."""

from __future__ import annotations

import math
from collections.abc import Mapping
from dataclasses import replace

from cuda_agent.agent.spec.checks import as_written, below_minimum, block_values, value_label
from cuda_agent.agent.spec.dtypes import INTEGER_RANGE, is_float
from cuda_agent.agent.spec.expressions import (
    Expression,
    ExpressionError,
    evaluate,
    parse_expression,
    parse_real_expression,
    uses_block,
)
from cuda_agent.agent.spec.model import (
    FLOAT_MAX,
    INFINITIES,
    ArgumentSpec,
    KernelSpec,
    KeyPath,
    SpecError,
    SpecResolveError,
    ToleranceSpec,
    ValueExpr,
)
from cuda_agent.agent.spec.validate import MAX_BLOCK_DIMS, MAX_THREADS_PER_BLOCK, split_template_arguments
from cuda_agent.sandbox.plan import (
    ArgumentPlan,
    Distribution,
    LaunchPlan,
    LaunchScalar,
    Problem,
    Tolerance,
)

MAX_GRID = (2**31 - 1, 65535, 65535)


def _fail(spec: KernelSpec, path: KeyPath, message: str) -> SpecResolveError:
    """An error at the value of `path` in the file (the whole comment, or nowhere for an inferred spec)."""
    span = spec.value_spans.get(path) or spec.span
    if span is None:
        return SpecResolveError(SpecError(message, 0, 0, 0, 0, spec.kernel))
    error = SpecError(
        message, span.start_line, span.start_column, span.end_line, span.end_column, spec.kernel
    )
    return SpecResolveError(error)


def _evaluate(
    spec: KernelSpec,
    path: KeyPath,
    value: ValueExpr,
    values: Mapping[str, int],
    minimum: int | None,
    what: str = "it",
) -> int:
    """An integer expression at `values`; `what` names it in "{what} must be ≥ {minimum}"."""
    if isinstance(value, float):
        raise _fail(spec, path, f"{value_label(path)} must be an integer, not {value}")
    try:
        expression = parse_expression(value, values.keys(), allow_block=True)
        result = expression.evaluate(values)
    except ExpressionError as error:
        raise _fail(spec, path, f"{as_written(path, value)}: {error.message}") from None
    if minimum is not None and result < minimum:
        raise _fail(spec, path, below_minimum(path, value, result, expression.names, values, what, minimum))
    return result


def _evaluate_real(spec: KernelSpec, path: KeyPath, value: ValueExpr, values: Mapping[str, int]) -> float:
    """A real expression (a float scalar, a float init parameter) at `values` (a scalar's value may use
    the block: validation keeps block.x/y/z out of the others)."""
    try:
        return parse_real_expression(value, values.keys(), allow_block=True).evaluate_real(values)
    except ExpressionError as error:
        raise _fail(spec, path, f"{as_written(path, value)}: {error.message}") from None


def complete_sizes(spec: KernelSpec, overrides: Mapping[str, int] | None = None) -> dict[str, int]:
    """Every size at a point: `overrides` where given, else the benchmark definition.

    A size written as an expression ("total = rows * cols") is re-derived from the overridden sizes,
    so extra verify sizes stay consistent; a size written as a number keeps its benchmark value.
    """
    overrides = dict(overrides or {})
    unknown = sorted(overrides.keys() - spec.sizes.keys())
    if unknown:
        raise _fail(
            spec, ("sizes",), f"unknown sizes {', '.join(unknown)} (sizes are: {', '.join(spec.sizes)})"
        )
    sizes: dict[str, int] = {}
    for name, benchmark in spec.sizes.items():
        if name in overrides:
            sizes[name] = overrides[name]
        else:
            sizes[name] = _evaluate(
                spec, ("sizes", name), spec.size_expressions.get(name, benchmark), sizes, 0, "a size"
            )
        if sizes[name] < 0:
            raise _fail(spec, ("sizes", name), f"size {name} is {sizes[name]}: sizes must be ≥ 0")
    return sizes


def constant_size(spec: KernelSpec, expression: str) -> int | None:
    """The value of a size expression when it is the same at the benchmark and at every verify size (a
    rewrite may then write it as a literal); None when it varies or does not evaluate."""
    values = set()
    for overrides in ({}, *spec.verify_sizes):
        try:
            values.add(evaluate(expression, complete_sizes(spec, overrides)))
        except (ExpressionError, SpecResolveError, ArithmeticError):
            return None
    return values.pop() if len(values) == 1 else None


def resolve(
    spec: KernelSpec, sizes: Mapping[str, int] | None = None, block: tuple[int, ...] | None = None
) -> tuple[Problem, LaunchPlan]:
    """The concrete problem and launch at `sizes` (missing ones: the benchmark's) with `block`
    (default: the spec's).

    Raises SpecResolveError when an expression cannot be evaluated there (negative sizes, a dimension of 0,
    division by zero, a grid beyond CUDA's limits, a scalar out of its dtype's range).
    """
    point = complete_sizes(spec, sizes)
    block = tuple(block or spec.launch.block)
    _check_block(spec, block)
    values = {**point, **block_values(block)}
    launch = _launch(spec, block, values)  # first: its errors are the ones reported first
    arguments = tuple(_argument(spec, argument, point, values) for argument in spec.arguments)
    launch = replace(launch, scalars=_launch_scalars(spec, arguments))
    by_name = {argument.name: argument for argument in arguments}
    reduction = (
        _evaluate(spec, ("verify", "reduction"), spec.reduction, point, 1, "the reduction length")
        if spec.reduction
        else None
    )
    tolerances = {output.name: _tolerance(spec, by_name[output.name], reduction) for output in spec.outputs}
    if spec.bytes_moved is not None:
        bytes_moved = _evaluate(spec, ("roofline", "bytes"), spec.bytes_moved, point, 0, "bytes")
        floor_bytes = bytes_moved
    else:  # compulsory traffic: every input read once, every output written once; inout both
        bytes_moved = sum(a.nbytes * (2 if a.role == "inout" else 1) for a in arguments if a.is_buffer)
        floor_bytes = sum(a.nbytes for a in arguments if a.role in ("output", "inout"))
    flops = _evaluate(spec, ("roofline", "flops"), spec.flops, point, 0, "flops") if spec.flops else 0
    problem = Problem(
        label=" ".join(f"{name}={value}" for name, value in point.items()) or spec.kernel,
        sizes=point,
        arguments=arguments,
        tolerances=tolerances,
        oracle=dict(spec.oracle) if spec.oracle else None,
        oracle_intermediates=spec.intermediates,
        bytes_moved=bytes_moved,
        floor_bytes=floor_bytes,
        flops=flops,
        flop_dtype=_flop_dtype(arguments),
    )
    return problem, launch


def _check_block(spec: KernelSpec, block: tuple[int, ...]) -> None:
    path = ("launch", "block")
    if not 1 <= len(block) <= 3:
        raise _fail(spec, path, f"a block has 1 to 3 dims, not {len(block)}")
    for i, (dim, limit) in enumerate(zip(block, MAX_BLOCK_DIMS, strict=False)):
        if not 1 <= dim <= limit:
            raise _fail(spec, path, f"block.{'xyz'[i]} = {dim} is outside [1, {limit}]")
    if math.prod(block) > MAX_THREADS_PER_BLOCK:
        raise _fail(
            spec, path, f"block {block} has {math.prod(block)} threads; at most {MAX_THREADS_PER_BLOCK}"
        )


def _launch(spec: KernelSpec, block: tuple[int, ...], values: Mapping[str, int]) -> LaunchPlan:
    grid = [
        _evaluate(spec, ("launch", "grid", i), dim, values, 1, "a grid dimension")
        for i, dim in enumerate(spec.launch.grid)
    ]
    grid += [1] * (3 - len(grid))
    for i, (dim, limit) in enumerate(zip(grid, MAX_GRID, strict=False)):
        if dim > limit:
            raise _fail(
                spec, ("launch", "grid", i), f"grid.{'xyz'[i]} = {dim} is more than CUDA's limit {limit}"
            )
    shared = _evaluate(spec, ("launch", "shared_bytes"), spec.launch.shared_bytes, values, 0, "shared_bytes")
    padded = (*block, *([1] * (3 - len(block))))
    return LaunchPlan(
        grid=(grid[0], grid[1], grid[2]), block=(padded[0], padded[1], padded[2]), shared_bytes=shared
    )


def _argument(
    spec: KernelSpec, argument: ArgumentSpec, sizes: Mapping[str, int], launch: Mapping[str, int]
) -> ArgumentPlan:
    """One argument at `sizes`; a scalar's value may also use `launch` (the sizes and block.x/y/z)."""
    path: KeyPath = ("args", argument.name)
    shape = tuple(
        _evaluate(spec, (*path, "shape", i), dim, sizes, 1, "a buffer dimension")
        for i, dim in enumerate(argument.shape)
    )
    distribution = _distribution(spec, argument, sizes, launch)
    return ArgumentPlan(
        argument.name, argument.role, argument.dtype, shape, distribution,  # type: ignore[arg-type]
        argument.may_alias, argument.accessor_bits,
    )  # fmt: skip


def _distribution(
    spec: KernelSpec, argument: ArgumentSpec, sizes: Mapping[str, int], launch: Mapping[str, int]
) -> Distribution:
    path: KeyPath = ("args", argument.name)
    if argument.value is not None:
        return Distribution(
            kind="value", value=_number(spec, (*path, "value"), argument.value, argument.dtype, launch)
        )
    init = argument.init
    assert init is not None  # the parser gives every argument a value or an init
    if init.dist in ("zeros", "ones"):  # a constant fill; the sandbox fills buffers with a "value" too
        fill = 0 if init.dist == "zeros" else 1
        return Distribution(kind="value", value=float(fill) if is_float(argument.dtype) else fill)
    if init.dist == "fill":
        return Distribution(kind="value", value=_fill(spec, argument, sizes))
    # The bounds of dist = "integers" are integer expressions, even for a float buffer (offsets are
    # integer buffers only: the parser says so).
    dtype = "int64" if init.dist == "integers" and is_float(argument.dtype) else argument.dtype
    low = _number(spec, (*path, "init", "low"), init.low, dtype, sizes, inclusive=True)
    high = _number(spec, (*path, "init", "high"), init.high, dtype, sizes, inclusive=False)
    if init.dist != "normal" and low >= high:
        raise _fail(spec, (*path, "init"), f"the init range of {argument.name} is empty: [{low}, {high})")
    mean = _evaluate_real(spec, (*path, "init", "mean"), init.mean, sizes)
    std = _evaluate_real(spec, (*path, "init", "std"), init.std, sizes)
    if init.dist == "normal" and std <= 0:
        raise _fail(
            spec,
            (*path, "init", "std"),
            f"{as_written((*path, 'init', 'std'), init.std)} is {std}: std must be > 0",
        )
    return Distribution(init.dist, mean, std, float(low), float(high))  # type: ignore[arg-type]


def _fill(spec: KernelSpec, argument: ArgumentSpec, sizes: Mapping[str, int]) -> int | float:
    """The constant of `init = { fill = ... }` at these sizes: ±inf as written, a real expression for float
    dtypes (within the dtype's finite range), an integer one (range-checked) for integer dtypes."""
    assert argument.init is not None and argument.init.fill is not None
    path: KeyPath = ("args", argument.name, "init", "fill")
    written = argument.init.fill
    if isinstance(written, str) and written.strip() in INFINITIES:
        return INFINITIES[written.strip()]
    if isinstance(written, float) and math.isinf(written):
        return written
    number = _number(spec, path, written, argument.dtype, sizes)
    limit = FLOAT_MAX.get(argument.dtype)
    if limit is not None and abs(number) > limit:
        raise _fail(
            spec,
            path,
            f"{as_written(path, written)} is {number:g}, beyond {argument.dtype}'s largest number "
            f"({limit:g}): it would be stored as infinity",
        )
    return float(number) if is_float(argument.dtype) else number


def _launch_scalars(spec: KernelSpec, arguments: tuple[ArgumentPlan, ...]) -> tuple[LaunchScalar, ...]:
    """The scalars whose value follows the block (`value = "block.x"`), with their value at this launch:
    they go with the launch, so a candidate run with another block gets its own (sandbox/plan.py)."""
    return tuple(
        LaunchScalar(position, plan.name, plan.dtype, plan.distribution.value)
        for position, (argument, plan) in enumerate(zip(spec.arguments, arguments, strict=True))
        if plan.distribution.value is not None and follows_launch(spec, argument)
    )


def follows_launch(spec: KernelSpec, argument: ArgumentSpec) -> bool:
    """Whether a scalar's value is written with the block (`"block.x"`, `"ceil_div(n, block.x)"`)."""
    if argument.role != "scalar" or not isinstance(argument.value, str):
        return False
    try:  # a real expression reads every integer one too: one parse answers for both kinds
        return uses_block(parse_real_expression(argument.value, spec.sizes, allow_block=True))
    except ExpressionError:
        return False


def instantiation(spec: KernelSpec, block: tuple[int, ...] | None = None) -> str | None:
    """The spec's `instantiate` at `block` (default: the spec's): each template argument written with
    block.x/y/z (`rms_norm<block.x>`) becomes its value there (`rms_norm<512>`); the others stay as
    written, and so does the whole text when none follows the block."""
    text = spec.instantiate
    following = _block_arguments(text)
    if text is None or not any(expression for _, expression in following):
        return text
    values = block_values(tuple(block or spec.launch.block))
    evaluated = []
    for argument, expression in following:
        try:
            evaluated.append(str(expression.evaluate(values)) if expression else argument)
        except ExpressionError as error:
            raise _fail(
                spec, ("instantiate",), f'instantiate argument "{argument}": {error.message}'
            ) from None
    return f"{text.partition('<')[0]}<{', '.join(evaluated)}>"


def instantiation_follows_block(spec: KernelSpec) -> bool:
    """Whether some template argument of `instantiate` is written with the block (`k<block.x>`)."""
    return any(expression for _, expression in _block_arguments(spec.instantiate))


def _block_arguments(text: str | None) -> list[tuple[str, Expression | None]]:
    """The template arguments of an instantiate, each with its expression when it follows the block; the
    others (`float`, `256`, `Pair<int, 2>`) are C++ as written. [] for a text without arguments."""
    if text is None or "<" not in text or not text.rstrip().endswith(">"):
        return []
    arguments = []
    for argument in split_template_arguments(text.partition("<")[2].rstrip()[:-1]):
        try:
            expression: Expression | None = parse_expression(argument, (), allow_block=True)
        except ExpressionError:
            expression = None
        arguments.append(
            (argument, expression if expression is not None and uses_block(expression) else None)
        )
    return arguments


def _number(
    spec: KernelSpec,
    path: KeyPath,
    value: ValueExpr,
    dtype: str,
    sizes: Mapping[str, int],
    inclusive: bool = True,
) -> int | float:
    """A scalar value or a bound at these sizes: a real expression for float dtypes, an integer one
    (range-checked) for integer dtypes."""
    if is_float(dtype):
        return _evaluate_real(spec, path, value, sizes)
    number = _evaluate(spec, path, value, sizes, None)
    _check_range(spec, path, number if inclusive else number - 1, dtype)
    return number


def _check_range(spec: KernelSpec, path: KeyPath, number: int, dtype: str) -> None:
    low, high = INTEGER_RANGE[dtype]
    if not low <= number <= high:
        raise _fail(spec, path, f"{value_label(path)} is {number}, outside {dtype}'s range [{low}, {high}]")


def _tolerance(spec: KernelSpec, output: ArgumentPlan, reduction: int | None) -> Tolerance:
    """Per-output override, else the global one, else the dtype default; missing parts from the default."""
    default = Tolerance.default(output.dtype, reduction)
    written = spec.output_tolerances.get(output.name) or spec.tolerance or ToleranceSpec()
    return Tolerance(
        default.atol if written.atol is None else written.atol,
        default.rtol if written.rtol is None else written.rtol,
    )


def _flop_dtype(arguments: tuple[ArgumentPlan, ...]) -> str:
    """The float dtype of the first output (else of the first float argument): which FLOP ceiling applies."""
    outputs = [a for a in arguments if a.role in ("output", "inout")]
    for argument in (*outputs, *arguments):
        if is_float(argument.dtype):
            return argument.dtype
    return "float32"
