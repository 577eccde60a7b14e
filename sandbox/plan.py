"""What the worker is asked to run: plain, concrete (all sizes evaluated), picklable data.

The agent turns a user's spec into these; the sandbox never sees expressions or TOML.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field
from typing import Literal

DType = Literal[
    "float32", "float16", "bfloat16", "float64",
    "int8", "int16", "int32", "int64", "uint8", "uint16", "uint32", "uint64",
]  # fmt: skip
Role = Literal["input", "output", "inout", "scalar"]

DTYPE_BYTES: dict[str, int] = {
    "float32": 4, "float16": 2, "bfloat16": 2, "float64": 8,
    "int8": 1, "int16": 2, "int32": 4, "int64": 8,
    "uint8": 1, "uint16": 2, "uint32": 4, "uint64": 8,
}  # fmt: skip
FLOAT_DTYPES = frozenset({"float32", "float16", "bfloat16", "float64"})

# KernelBench's tolerances: 1e-4 for fp32, 1e-2 for half types; integers must match exactly.
DEFAULT_TOLERANCE: dict[str, tuple[float, float]] = {
    "float64": (1e-8, 1e-8),
    "float32": (1e-4, 1e-4),
    "float16": (1e-2, 1e-2),
    "bfloat16": (1e-2, 1e-2),
}


@dataclass(frozen=True)
class Distribution:
    """How an input's values are drawn. `value` is for scalars fixed by the spec."""

    # offsets: 0, then each element the one before plus a count from [low, high) (CSR row pointers)
    kind: Literal["normal", "uniform", "integers", "offsets", "value"] = "normal"
    mean: float = 0.0
    std: float = 1.0
    low: float = 0.0  # uniform: [low, high); integers: [low, high)
    high: float = 1.0
    value: float | int | None = None


@dataclass(frozen=True)
class Tolerance:
    atol: float
    rtol: float

    @staticmethod
    def default(dtype: str, reduction_length: int | None = None) -> Tolerance:
        atol, rtol = DEFAULT_TOLERANCE.get(dtype, (0.0, 0.0))
        if reduction_length and reduction_length > 1 and dtype in FLOAT_DTYPES:
            # Rounding errors of a sum of K terms add up like a random walk: about sqrt(K) steps for
            # bounded partial sums, but for zero-mean random inputs the partial sums themselves grow like
            # sqrt(K), so the error of a float32 accumulator grows like u*K (u = 2^-24). Allow both,
            # with a factor of 2 (a 16M-element atomic sum of N(0,1) values is off by about 1.0).
            float32_accumulator = 0.0 if dtype == "float64" else 2.0 * 2.0**-24 * reduction_length
            atol = max(atol * math.sqrt(reduction_length), float32_accumulator)
        return Tolerance(atol, rtol)


@dataclass(frozen=True)
class ArgumentPlan:
    """One kernel parameter, in signature order."""

    name: str
    role: Role
    dtype: DType
    shape: tuple[int, ...] = ()  # () for scalars
    distribution: Distribution = field(default_factory=Distribution)
    # Name of an input this output may share memory with (the kernel must then work in place).
    may_alias: str | None = None
    # 32 or 64: passed as PyTorch's packed accessor (data pointer, then `shape` and its contiguous strides
    # as integers of that width; sandbox/buffers.py `passed`). 0: passed as a pointer.
    accessor_bits: int = 0

    @property
    def is_buffer(self) -> bool:
        return self.role != "scalar"

    @property
    def numel(self) -> int:
        return math.prod(self.shape) if self.shape else 1

    @property
    def nbytes(self) -> int:
        return self.numel * DTYPE_BYTES[self.dtype]


@dataclass(frozen=True)
class Problem:
    """One size point of a kernel's spec: the arguments with concrete shapes and what counts as right."""

    label: str  # "n=16777216", shown to the user
    sizes: dict[str, int]
    arguments: tuple[ArgumentPlan, ...]
    tolerances: dict[str, Tolerance]  # per output/inout argument name
    # Output/inout name -> PyTorch expression over argument and size names (spelled as
    # sandbox/oracle_names.py says). Outputs without one are checked against the reference kernel.
    # None: the original kernel is the oracle for every output.
    oracle: dict[str, str] | None = None
    # Named values the oracle expressions may use, (name, expression) in the order they are evaluated;
    # each may use the ones before it.
    oracle_intermediates: tuple[tuple[str, str], ...] = ()
    bytes_moved: int = 0  # compulsory DRAM traffic, for the roofline
    # The bytes any correct kernel must move, for the plausibility floor: the spec's `bytes` where written
    # (its author vouches for it), else the outputs written once. An input may be read only in part (a
    # gather's embedding table, the lower half of a causal mask): counting it whole rejected honest
    # kernels as faster than physics. None: bytes_moved.
    floor_bytes: int | None = None
    flops: int = 0
    flop_dtype: str = "float32"  # which measured FLOP ceiling applies

    @property
    def outputs(self) -> tuple[ArgumentPlan, ...]:
        return tuple(a for a in self.arguments if a.role in ("output", "inout"))


@dataclass(frozen=True)
class LaunchScalar:
    """A scalar argument whose value follows the launch (a spec's `value = "block.x"`: the tile width or
    block size a kernel takes as a parameter). It belongs to each kernel's own launch, not to the problem:
    a candidate tuned to block 512 gets 512 while the original it is checked against keeps its 256."""

    position: int  # in the signature
    name: str
    dtype: DType
    value: int | float


@dataclass(frozen=True)
class LaunchPlan:
    grid: tuple[int, int, int]
    block: tuple[int, int, int]
    shared_bytes: int = 0
    # Scalars evaluated with this launch's block; they replace the problem's value of those arguments in
    # every launch of this plan (sandbox/buffers.py `launch`). The PyTorch oracle sees the problem's.
    scalars: tuple[LaunchScalar, ...] = ()

    @property
    def threads(self) -> int:
        return math.prod(self.block) * math.prod(self.grid)


@dataclass(frozen=True)
class ResourceUsage:
    registers: int | None = None
    shared_bytes: int | None = None  # static shared memory
    stack_bytes: int | None = None
    spill_store_bytes: int | None = None
    spill_load_bytes: int | None = None

    @property
    def spilled_bytes(self) -> int | None:
        """Spill stores and loads together; None when ptxas reported neither."""
        if self.spill_store_bytes is None and self.spill_load_bytes is None:
            return None
        return (self.spill_store_bytes or 0) + (self.spill_load_bytes or 0)


@dataclass(frozen=True)
class ConstantInput:
    """A floating-point `__constant__` array of the kernel's file, which host code fills before launching
    (a convolution's mask, a filter's weights). Left as loaded it holds zeros, and every kernel reading it
    computes as if the weights were 0: a wrong rewrite would match the original there. The sandbox fills
    it with values drawn from its name, the same in every module it loads (sandbox/buffers.py)."""

    name: str
    dtype: DType


@dataclass(frozen=True)
class CompiledKernel:
    """A loadable kernel: the cubin and the symbol to look up in it."""

    name: str  # as the user wrote it, e.g. "reduce<float, 256>"
    lowered_name: str  # the symbol in the cubin
    cubin: bytes
    backend: Literal["nvrtc", "nvcc"]
    arch: str  # "sm_90"
    flags: tuple[str, ...] = ()
    resources: ResourceUsage = field(default_factory=ResourceUsage)
    source_sha256: str = ""
    constants: tuple[ConstantInput, ...] = ()  # filled at load, before any launch


@dataclass(frozen=True)
class KernelUnderTest:
    """A compiled kernel with its launch configuration for each problem (same order as the problems)."""

    compiled: CompiledKernel
    launches: tuple[LaunchPlan, ...]
    label: str = "candidate"
