"""The spec of a kernel: how to run it, as the user wrote it (expressions kept) or as inferred.

`resolve` turns a KernelSpec into the sandbox's concrete Problem/LaunchPlan at one size point.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field
from typing import Literal

from cuda_agent.agent.kernels import Span
from cuda_agent.agent.spec.dtypes import is_float

ROLES = ("input", "output", "inout", "scalar")
DISTRIBUTIONS = ("normal", "uniform", "integers", "offsets", "zeros", "ones")

# A number as written, or an expression of the sizes: integer ("cols", "rows * 2") where the value is an
# integer, real ("1 / sqrt(cols)") for float scalars and float init parameters.
ValueExpr = int | float | str
# A key path into the spec's TOML: ("args", "x", "shape", 1).
KeyPath = tuple[str | int, ...]


# A constant fill's infinities, as a spec writes them (`fill = "-inf"`); TOML's bare `-inf` is a float.
INFINITIES = {"inf": math.inf, "+inf": math.inf, "-inf": -math.inf}
# The largest finite number of each float dtype: a fill beyond it would be stored as infinity.
FLOAT_MAX = {
    "float16": 65504.0,
    "bfloat16": 3.3895313892515355e38,
    "float32": 3.4028234663852886e38,
    "float64": 1.7976931348623157e308,
}


@dataclass(frozen=True)
class InitSpec:
    """How an input is drawn. mean/std/low/high may be expressions of the sizes (e.g. integers in
    [0, cols), std = "1 / sqrt(cols)").

    zeros/ones fill every element with 0/1 (an accumulator that the kernel adds into); dist "fill" fills
    every element with `fill` (`init = { fill = "-inf" }`: a running maximum's start), a number, "inf",
    "-inf" or an expression of the sizes. "offsets" are a CSR matrix's row pointers: 0, then each element
    the one before plus a count drawn from [low, high) (rows of low to high - 1 entries)."""

    dist: Literal["normal", "uniform", "integers", "offsets", "zeros", "ones", "fill"] = "normal"
    mean: ValueExpr = 0.0
    std: ValueExpr = 1.0
    low: ValueExpr = 0
    high: ValueExpr = 1
    fill: ValueExpr | None = None  # dist "fill" only: as written

    @staticmethod
    def default(dtype: str, dist: str | None = None) -> InitSpec:
        """normal(0, 1) for floats, integers in [0, 100) for integer dtypes (offsets: counts in [0,
        100)); uniform is [0, 1)."""
        dist = dist or ("normal" if is_float(dtype) else "integers")
        if dist in ("integers", "offsets"):
            return InitSpec(dist, low=0, high=100)  # type: ignore[arg-type]
        return InitSpec(dist)  # type: ignore[arg-type]


@dataclass(frozen=True)
class ArgumentSpec:
    """One kernel parameter. Buffers have a shape and an init; scalars a value or an init."""

    name: str
    role: Literal["input", "output", "inout", "scalar"]
    dtype: str  # canonical: float32, float16, ..., uint64
    shape: tuple[str, ...] = ()  # expressions of the sizes; () for scalars
    init: InitSpec | None = None
    # Scalars with a fixed value: of the sizes, or of the launch too (`value = "block.x"`, a tile width the
    # kernel takes as a parameter), then evaluated with each kernel's own block (LaunchPlan.scalars).
    value: ValueExpr | None = None
    may_alias: str | None = None  # an output that may share memory with this input (in-place kernels)
    # 32 or 64 for a parameter declared as a PyTorch packed accessor (its index width), read from the
    # signature, never written: the sandbox passes the buffer with its sizes and strides. 0: a pointer.
    accessor_bits: int = 0

    @property
    def is_buffer(self) -> bool:
        return self.role != "scalar"


@dataclass(frozen=True)
class LaunchSpec:
    block: tuple[int, ...]  # 1 to 3 dims; the optimizer tunes it
    grid: tuple[str, ...]  # expressions of the sizes and block.x/y/z, same rank as block
    shared_bytes: str = "0"  # dynamic shared memory, an expression like grid's


@dataclass(frozen=True)
class ToleranceSpec:
    """A tolerance as written; a missing part takes the dtype's default at resolve time."""

    atol: float | None = None
    rtol: float | None = None


@dataclass(frozen=True)
class KernelSpec:
    kernel: str
    arguments: tuple[ArgumentSpec, ...]  # in signature order
    launch: LaunchSpec
    sizes: dict[str, int] = field(default_factory=dict)  # benchmark sizes, evaluated, in declaration order
    size_expressions: dict[str, str] = field(default_factory=dict)  # as written, to re-derive at other sizes
    # "softmax<float, 256>" for templated kernels; a value argument may follow the block ("k<block.x>"), and
    # is then evaluated at each launch's block (`instantiation` in resolve.py).
    instantiate: str | None = None
    verify_sizes: tuple[dict[str, int], ...] = ()  # as written: only the sizes that differ from the benchmark
    oracle: dict[str, str] | None = (
        None  # output name -> PyTorch expression; outputs left out: the original's
    )
    # [verify.intermediates]: (name, PyTorch expression) in order, each over the arguments, the sizes and
    # the intermediates before it; the oracle expressions may use them all.
    intermediates: tuple[tuple[str, str], ...] = ()
    tolerance: ToleranceSpec | None = None  # for every output
    output_tolerances: dict[str, ToleranceSpec] = field(default_factory=dict)  # overrides per output
    reduction: str | None = None  # length of the reductions behind each output element (scales tolerances)
    flops: str | None = None
    bytes_moved: str | None = None  # `bytes` in the spec; default: inputs once + outputs once (inout twice)
    # Compiler settings of this kernel's file, as written: extra flags (`-DUSE_FAST=1`) and include folders
    # relative to the .cu file's folder. The compile step adds them to its own.
    flags: tuple[str, ...] = ()
    include_dirs: tuple[str, ...] = ()
    inferred: bool = False
    inference_note: str = ""
    # Where it came from, for diagnostics and in-place edits; not part of what the spec means.
    span: Span | None = field(default=None, compare=False)  # the whole /* cuda-agent ... */ comment
    block_span: Span | None = field(default=None, compare=False)  # the `[32, 8]` value of launch.block
    value_spans: dict[KeyPath, Span] = field(default_factory=dict, compare=False, repr=False)

    def argument(self, name: str) -> ArgumentSpec | None:
        return next((argument for argument in self.arguments if argument.name == name), None)

    @property
    def outputs(self) -> tuple[ArgumentSpec, ...]:
        return tuple(argument for argument in self.arguments if argument.role in ("output", "inout"))


@dataclass(frozen=True)
class SpecError:
    """A problem in a spec, located in the .cu file: 0-based lines, columns in UTF-8 bytes."""

    message: str
    line: int
    column: int
    end_line: int
    end_column: int
    kernel: str | None = None

    def describe(self, path: str = "") -> str:
        """'file.cu:12:5: message' with 1-based numbers, as compilers print it."""
        return f"{path}{':' if path else ''}{self.line + 1}:{self.column + 1}: {self.message}"


class SpecResolveError(Exception):
    """A spec that parsed but cannot be evaluated at some sizes (a negative size, a buffer or grid dimension
    of 0, division by zero, overflow)."""

    def __init__(self, error: SpecError) -> None:
        super().__init__(error.message)
        self.error = error
