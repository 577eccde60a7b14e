"""GPU memory for one launch, and the launch itself (worker side; imports cupy).

Every buffer is its own allocation with a guard region on each side, filled with a known byte, so any
out-of-bounds write shows up as a changed guard byte. Inputs are drawn on the GPU by a counter-based
generator: the value of element i depends only on (seed, argument, i), so an input set is replayed from
its seed alone and fresh inputs cost one pass over memory (cheap enough to give every timed launch
inputs it has never seen).
"""

from __future__ import annotations

import ctypes
import functools
import hashlib
import zlib
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

import cupy
import numpy as np
from cuda_agent.sandbox.accessors import accessor_struct
from cuda_agent.sandbox.checks import check_guards, float32_to_bfloat16_bits
from cuda_agent.sandbox.plan import ArgumentPlan, CompiledKernel, ConstantInput, LaunchPlan, Problem
from cuda_agent.sandbox.reports import CheckFailure

GUARD_BYTES = 64 * 1024  # each side; a multiple of 256, so the data pointer keeps the allocation's alignment
GUARD_BYTE = 0xCD
POISON_BYTES = (0xFF, 0xA5)  # 0xFF.. is NaN in every float type; alternated so unwritten can be told apart
CUDA_ERRORS = (cupy.cuda.runtime.CUDARuntimeError, cupy.cuda.driver.CUDADriverError)


def storage_dtype(dtype: str) -> np.dtype:
    """The dtype a buffer is held in: bfloat16 as its uint16 bit patterns (numpy/cupy have no bfloat16)."""
    return np.dtype(np.uint16) if dtype == "bfloat16" else np.dtype(dtype)


# -- random inputs ------------------------------------------------------------------------------------

_MIX = r"""
__device__ __forceinline__ unsigned long long ca_mix64(unsigned long long z) {
    z += 0x9E3779B97F4A7C15ull;
    z = (z ^ (z >> 30)) * 0xBF58476D1CE4E5B9ull;
    z = (z ^ (z >> 27)) * 0x94D049BB133111EBull;
    return z ^ (z >> 31);
}
"""
# Two 24-bit uniforms from one 64-bit hash of (seed, i): u1 in (0, 1) for the logarithm, u2 in [0, 1).
_UNIFORMS_F32 = """
    unsigned long long z = ca_mix64(seed ^ ca_mix64((unsigned long long)i));
    float u1 = ((float)(z >> 40) + 0.5f) * 5.9604644775390625e-08f;
    float u2 = (float)((z >> 16) & 0xFFFFFFull) * 5.9604644775390625e-08f;
    float v = kind == 0 ? p0 + p1 * sqrtf(-2.0f * logf(u1)) * cospif(2.0f * u2) : p0 + (p1 - p0) * u2;
"""
_kernels: dict[str, Any] = {}


def _kernel(name: str) -> Any:
    """The generator kernels, built on first use (CuPy compiles and caches them on disk)."""
    if name not in _kernels:
        if name == "float":  # float16/float32 out: float math, converted on store
            body = _UNIFORMS_F32 + "    out = (T)v;"
            kernel = cupy.ElementwiseKernel(
                "uint64 seed, float32 p0, float32 p1, int32 kind",
                "T out",
                body,
                "ca_fill_float",
                preamble=_MIX,
            )
        elif name == "bfloat16":  # uint16 out: float32 rounded to the nearest bfloat16, ties to even
            body = _UNIFORMS_F32 + (
                "    unsigned int b = __float_as_uint(v);\n"
                "    out = (unsigned short)((b + 0x7FFFu + ((b >> 16) & 1u)) >> 16);"
            )
            kernel = cupy.ElementwiseKernel(
                "uint64 seed, float32 p0, float32 p1, int32 kind", "uint16 out", body, "ca_fill_bf16",
                preamble=_MIX,
            )  # fmt: skip
        elif name == "float64":  # double math, 53-bit uniforms
            body = """
    unsigned long long z = ca_mix64(seed ^ ca_mix64((unsigned long long)i));
    unsigned long long w = ca_mix64(z);
    double u1 = ((double)(z >> 11) + 0.5) * 1.1102230246251565e-16;
    double u2 = (double)(w >> 11) * 1.1102230246251565e-16;
    out = kind == 0 ? p0 + p1 * sqrt(-2.0 * log(u1)) * cospi(2.0 * u2) : p0 + (p1 - p0) * u2;"""
            kernel = cupy.ElementwiseKernel(
                "uint64 seed, float64 p0, float64 p1, int32 kind", "float64 out", body, "ca_fill_f64",
                preamble=_MIX,
            )  # fmt: skip
        else:  # integers in [low, low + span)
            body = """
    unsigned long long z = ca_mix64(seed ^ ca_mix64((unsigned long long)i));
    out = (T)(low + (long long)(z % span));"""
            kernel = cupy.ElementwiseKernel(
                "uint64 seed, int64 low, uint64 span", "T out", body, "ca_fill_int", preamble=_MIX
            )
        _kernels[name] = kernel
    return _kernels[name]


# A user ReductionKernel reduces to one value with a single block (CuPy's CUB path is only for its own
# reductions): 200 ms for 1 GiB, measured. This grid-stride count with one atomic per warp is one pass.
_COUNT_POISONED = r"""
extern "C" __global__ void ca_count_poisoned(const unsigned char* data, unsigned long long n, int itemsize,
                                             unsigned long long word, unsigned long long* count) {
    unsigned long long local = 0;
    for (unsigned long long i = blockIdx.x * (unsigned long long)blockDim.x + threadIdx.x; i < n;
         i += (unsigned long long)gridDim.x * blockDim.x) {
        unsigned long long v;
        switch (itemsize) {
            case 1: v = data[i]; break;
            case 2: v = ((const unsigned short*)data)[i]; break;
            case 4: v = ((const unsigned int*)data)[i]; break;
            default: v = ((const unsigned long long*)data)[i]; break;
        }
        local += v == word;
    }
    for (int offset = 16; offset > 0; offset >>= 1) local += __shfl_down_sync(0xffffffffu, local, offset);
    if ((threadIdx.x & 31) == 0 && local) atomicAdd(count, local);
}
"""


def count_poisoned(values: cupy.ndarray, poison_byte: int) -> cupy.ndarray:
    """How many elements still hold `poison_byte` in every byte, as a device scalar: one pass, no sync,
    so it can be queued behind every timed launch and read once at the end."""
    if "count_poisoned" not in _kernels:
        _kernels["count_poisoned"] = cupy.RawKernel(_COUNT_POISONED, "ca_count_poisoned")
    count = cupy.zeros(1, dtype=cupy.uint64)
    if values.size:
        itemsize = values.dtype.itemsize
        word = int.from_bytes(bytes([poison_byte]) * itemsize, "little")
        blocks = min(-(-values.size // 256), 4096)
        args = (values, np.uint64(values.size), np.int32(itemsize), np.uint64(word), count)
        _kernels["count_poisoned"]((blocks,), (256,), args)
    return count.reshape(())


def memset(region: cupy.ndarray, byte: int) -> None:
    """Fill a contiguous region with one byte value on the current stream (cudaMemsetAsync: CuPy's fill
    uses a memset only for zero)."""
    if region.nbytes:
        stream = cupy.cuda.get_current_stream().ptr
        cupy.cuda.runtime.memsetAsync(region.data.ptr, byte, region.nbytes, stream)


def argument_seed(seed: int, argument: ArgumentPlan) -> int:
    """Each argument its own stream of numbers, fixed by the input set's seed and the argument's name."""
    digest = hashlib.blake2b(f"{seed}:{argument.name}".encode(), digest_size=8).digest()
    return int.from_bytes(digest, "little")


def fill_random(out: cupy.ndarray, argument: ArgumentPlan, seed: int) -> None:
    """Draw `argument`'s values into `out` (storage dtype) on the current stream."""
    dist, dtype = argument.distribution, argument.dtype
    if out.size == 0:
        return
    if dist.kind == "value":  # zeros, ones and `fill`: a constant (±inf too), written by a device fill
        out.fill(constant_of(dtype, dist.value if dist.value is not None else 0))
        return
    s = np.uint64(argument_seed(seed, argument))
    if dist.kind in ("integers", "offsets"):
        span = max(1, int(dist.high) - int(dist.low))
        _kernel("int")(s, np.int64(int(dist.low)), np.uint64(span), out)
        if dist.kind == "offsets":  # the counts summed: 0, c1, c1 + c2, ... (a CSR matrix's row pointers)
            flat = out.reshape(-1)
            flat[0] = 0
            flat[...] = cupy.cumsum(flat)  # summed in the platform's integer, stored back in the dtype
        return
    kind = np.int32(0 if dist.kind == "normal" else 1)
    p0, p1 = (dist.mean, dist.std) if dist.kind == "normal" else (dist.low, dist.high)
    if dtype == "float64":
        _kernel("float64")(s, np.float64(p0), np.float64(p1), kind, out)
    elif dtype == "bfloat16":
        _kernel("bfloat16")(s, np.float32(p0), np.float32(p1), kind, out)
    else:  # float16, float32, and integer dtypes asked for a float distribution (truncated on store)
        _kernel("float")(s, np.float32(p0), np.float32(p1), kind, out)


def draw_scalar(argument: ArgumentPlan, seed: int) -> np.generic:
    """A scalar argument, as the numpy scalar of its exact type (the launch passes it by value)."""
    dist = argument.distribution
    if dist.kind == "value":
        value: float = dist.value if dist.value is not None else 0
    else:
        rng = np.random.default_rng(argument_seed(seed, argument))
        if dist.kind == "normal":
            value = float(rng.normal(dist.mean, dist.std))
        elif dist.kind == "uniform":
            value = float(rng.uniform(dist.low, dist.high))
        else:
            value = int(rng.integers(int(dist.low), max(int(dist.low) + 1, int(dist.high))))
    return constant_of(argument.dtype, value)


def constant_of(dtype: str, value: float | int) -> np.generic:
    """A number as the numpy scalar a buffer or scalar of `dtype` holds (bfloat16: its bit pattern)."""
    if dtype == "bfloat16":
        return float32_to_bfloat16_bits(np.float32(value))[()]
    return storage_dtype(dtype).type(value)


def with_launch_scalars(plan: LaunchPlan, args: tuple[Any, ...]) -> tuple[Any, ...]:
    """The arguments with the plan's own scalars in place (`value = "block.x"`): each kernel launched
    gets the values of its own block, whatever set of arguments it is handed."""
    if not plan.scalars:
        return args
    values = list(args)
    for scalar in plan.scalars:
        if not 0 <= scalar.position < len(values):
            raise LaunchError(f"scalar {scalar.name} is argument {scalar.position + 1} of {len(values)}")
        values[scalar.position] = constant_of(scalar.dtype, scalar.value)
    return tuple(values)


def scalar_value(argument: ArgumentPlan, value: np.generic) -> float | int:
    """The Python number a scalar stands for (for an oracle expression)."""
    if argument.dtype == "bfloat16":
        return float(np.asarray(int(value) << 16, dtype=np.uint32).view(np.float32))
    return value.item()


@dataclass
class Inputs:
    """One input set, kept apart from any kernel's buffers: the pristine copy checks compare against."""

    seed: int
    arrays: dict[str, cupy.ndarray]  # inputs and inouts, storage dtype, argument shape
    scalars: dict[str, np.generic]


def draw_inputs(problem: Problem, seed: int) -> Inputs:
    arrays, scalars = {}, {}
    for argument in problem.arguments:
        if argument.role == "scalar":
            scalars[argument.name] = draw_scalar(argument, seed)
        elif argument.role in ("input", "inout"):
            array = cupy.empty(argument.shape, dtype=storage_dtype(argument.dtype))
            fill_random(array, argument, seed)
            arrays[argument.name] = array
    return Inputs(seed, arrays, scalars)


# -- how a buffer is passed ---------------------------------------------------------------------------


def passed(argument: ArgumentPlan, data: cupy.ndarray) -> Any:
    """A buffer as its kernel parameter takes it: the array (CuPy passes its pointer), or for a PyTorch
    packed accessor the struct torch builds on the host (sandbox/accessors.py)."""
    if not argument.accessor_bits:
        return data
    return accessor_struct(data.data.ptr, argument.shape, argument.accessor_bits)


# -- guarded buffers ----------------------------------------------------------------------------------


class GuardedBuffer:
    """One allocation: GUARD_BYTES of guard, the argument's data, GUARD_BYTES of guard."""

    def __init__(self, argument: ArgumentPlan) -> None:
        self.argument = argument
        self.raw = cupy.empty(2 * GUARD_BYTES + argument.nbytes, dtype=cupy.uint8)
        self._data_bytes = self.raw[GUARD_BYTES : GUARD_BYTES + argument.nbytes]
        self.data = self._data_bytes.view(storage_dtype(argument.dtype)).reshape(argument.shape)
        assert self._data_bytes.data.ptr % 256 == 0, "data pointer must be 256-byte aligned"

    def fill_guards(self) -> None:
        memset(self.raw[:GUARD_BYTES], GUARD_BYTE)
        memset(self.raw[GUARD_BYTES + self.argument.nbytes :], GUARD_BYTE)

    def poison(self, byte: int) -> None:
        memset(self._data_bytes, byte)

    def check_guards(self) -> CheckFailure | None:
        return check_guards(self.raw, GUARD_BYTE, GUARD_BYTES, argument=self.argument.name)


class ArgumentSet:
    """Everything one launch of a kernel on one problem needs: a guarded buffer per pointer argument and
    the scalar values. Each kernel gets its own set, so no kernel ever sees another's output buffer."""

    def __init__(self, problem: Problem) -> None:
        self.problem = problem
        self.buffers = {a.name: GuardedBuffer(a) for a in problem.arguments if a.is_buffer}
        self.scalars: dict[str, np.generic] = {}
        for buffer in self.buffers.values():
            buffer.fill_guards()

    def load(self, inputs: Inputs) -> None:
        """Copy an input set in (inputs and inouts); outputs are left for `poison_outputs`."""
        for name, array in inputs.arrays.items():
            self.buffers[name].data[...] = array
        self.scalars = dict(inputs.scalars)

    def draw(self, problem: Problem, seed: int) -> None:
        """Draw an input set straight into the buffers: the same values `draw_inputs(problem, seed)` gives."""
        for argument in problem.arguments:
            if argument.role == "scalar":
                self.scalars[argument.name] = draw_scalar(argument, seed)
            elif argument.role in ("input", "inout"):
                fill_random(self.buffers[argument.name].data, argument, seed)

    def poison_outputs(self, byte: int) -> None:
        for buffer in self.buffers.values():
            if buffer.argument.role == "output":
                buffer.poison(byte)

    def outputs(self) -> dict[str, cupy.ndarray]:
        """Outputs and inouts: what the kernel is judged on."""
        return {n: b.data for n, b in self.buffers.items() if b.argument.role in ("output", "inout")}

    def launch_args(self, alias: Mapping[str, str] | None = None) -> tuple[Any, ...]:
        """The kernel's arguments in signature order; `alias` points an output at an input's data."""
        alias = alias or {}
        args: list[Any] = []
        for argument in self.problem.arguments:
            if argument.role == "scalar":
                args.append(self.scalars[argument.name])
            else:
                args.append(passed(argument, self.buffers[alias.get(argument.name, argument.name)].data))
        return tuple(args)

    def check_guards(self) -> CheckFailure | None:
        for buffer in self.buffers.values():
            failure = buffer.check_guards()
            if failure is not None:
                return failure
        return None


# -- loading and launching ----------------------------------------------------------------------------


class LaunchError(Exception):
    """The kernel could not be loaded or launched, and the context is still healthy (bad launch
    configuration, too much shared memory, symbol not in the cubin)."""


class FatalCudaError(Exception):
    """A sticky error: the context is unusable (illegal address, trap, misaligned access). The worker
    reports it and exits."""


def context_is_broken() -> bool:
    """Sticky errors come back from every later call; a healthy context synchronises cleanly."""
    try:
        cupy.cuda.runtime.deviceSynchronize()
    except CUDA_ERRORS:
        return True
    return False


def classify(error: Exception, what: str) -> LaunchError | FatalCudaError:
    if context_is_broken():
        return FatalCudaError(f"{error} ({what})")
    return LaunchError(f"{error} ({what})")


class KernelModules:
    """The cubins loaded for one request, keyed by (cubin digest, role): the reference's `__device__`
    globals stay apart from the candidate's, and a new request starts from fresh globals."""

    def __init__(self) -> None:
        self._functions: dict[tuple[str, str], Any] = {}

    def function(self, kernel: CompiledKernel, role: str) -> Any:
        key = (hashlib.sha256(kernel.cubin).hexdigest(), role)
        if key not in self._functions:
            try:
                module = cupy.cuda.function.Module()
                module.load(kernel.cubin)
                self._functions[key] = module.get_function(kernel.lowered_name)
                fill_constants(module, kernel.constants)
            except CUDA_ERRORS as exc:
                raise classify(exc, f"loading {kernel.name!r} ({kernel.lowered_name})") from exc
        return self._functions[key]

    def clear(self) -> None:
        self._functions.clear()


def fill_constants(module: Any, constants: tuple[ConstantInput, ...]) -> None:
    """Fill the module's `__constant__` inputs with values drawn from their names (normal(0, 1)): every
    module loaded, the original's and a candidate's, reads the same. One the cubin lacks is skipped."""
    if not constants:
        return
    for constant in constants:
        found = _module_global(module.ptr, constant.name)
        if found is None:
            continue  # not in this cubin (a candidate that no longer reads it)
        address, size = found
        dtype = storage_dtype(constant.dtype)
        values = cupy.empty(size // dtype.itemsize, dtype=dtype)
        plan = ArgumentPlan(constant.name, "input", constant.dtype, (values.size,))
        fill_random(values, plan, zlib.crc32(constant.name.encode()))
        cupy.cuda.runtime.memcpy(
            address, values.data.ptr, values.nbytes, cupy.cuda.runtime.memcpyDeviceToDevice
        )
    cupy.cuda.runtime.deviceSynchronize()


def _module_global(module: int, name: str) -> tuple[int, int] | None:
    """(address, bytes) of a module's global, from the driver (CuPy's own lookup drops the size)."""
    address, size = ctypes.c_uint64(), ctypes.c_size_t()
    found = _driver().cuModuleGetGlobal_v2(
        ctypes.byref(address), ctypes.byref(size), ctypes.c_void_p(module), name.encode()
    )
    return (address.value, size.value) if found == 0 else None


@functools.cache
def _driver() -> ctypes.CDLL:
    return ctypes.CDLL("libcuda.so.1")


_MAX_DYNAMIC_SHARED = getattr(cupy.cuda.driver, "CU_FUNC_ATTRIBUTE_MAX_DYNAMIC_SHARED_SIZE_BYTES", 8)


# Whether a kernel under test may still be running: set by every launch, cleared once the stream has
# drained after one. The worker's host-work heartbeat reads it: a hung kernel must fall silent.
_kernel_queued = False


def kernel_queued() -> bool:
    return _kernel_queued


def launch(function: Any, plan: LaunchPlan, args: tuple[Any, ...], stream: cupy.cuda.Stream) -> None:
    """Enqueue one launch on `stream` (no wait). Above 48 KiB of dynamic shared memory needs an opt-in.
    Every launch (verify, time, replay, sanitizer) comes here, so the plan's own scalars apply to all."""
    global _kernel_queued
    _kernel_queued = True
    if plan.shared_bytes > 48 * 1024:
        cupy.cuda.driver.funcSetAttribute(function.ptr, _MAX_DYNAMIC_SHARED, plan.shared_bytes)
    args = with_launch_scalars(plan, args)
    function(plan.grid, plan.block, args, shared_mem=plan.shared_bytes, stream=stream)


def launch_and_wait(
    function: Any, plan: LaunchPlan, args: tuple[Any, ...], stream: cupy.cuda.Stream, what: str
) -> None:
    """Launch and synchronise; raise LaunchError (context fine) or FatalCudaError (context gone)."""
    global _kernel_queued
    try:
        launch(function, plan, args, stream)
        stream.synchronize()
    except CUDA_ERRORS as exc:
        raise classify(exc, what) from exc
    _kernel_queued = False  # every launch is on this one stream: all of them have finished
