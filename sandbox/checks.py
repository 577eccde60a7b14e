"""The verifier's checks as plain array functions: numpy on the CPU (CI, crafted buffers), cupy on the GPU.

Every function takes arrays in their *storage* dtype (bfloat16 arrives as uint16 bit patterns) and
returns None when the check passes, else one CheckFailure that says which elements, how many, how far
off, and where the first one is. The caller adds the problem label and the input set's seed.
"""

from __future__ import annotations

from typing import Any

import numpy as np
from cuda_agent.sandbox.plan import Tolerance
from cuda_agent.sandbox.reports import CheckFailure, CheckName

Array = Any  # numpy.ndarray or cupy.ndarray: typed loosely, cupy is not importable in CI
INTEGER_DTYPES = frozenset({"int8", "int16", "int32", "int64", "uint8", "uint16", "uint32", "uint64"})


def array_module(array: Array) -> Any:
    """numpy or cupy, whichever owns `array`, without importing cupy where it is not needed."""
    if type(array).__module__.startswith("cupy"):
        import cupy

        return cupy
    return np


def bfloat16_bits_to_float32(bits: Array) -> Array:
    """bfloat16 is the top half of a float32: shift the bits back into place."""
    xp = array_module(bits)
    return (bits.astype(xp.uint32) << 16).view(xp.float32)


def float32_to_bfloat16_bits(values: Array) -> Array:
    """Round float32 to the nearest bfloat16 (ties to even), as the hardware's conversion does."""
    xp = array_module(values)
    values = xp.asarray(values, dtype=xp.float32)
    bits = values.copy().view(xp.uint32)  # the copy is contiguous, also for 0-d arrays
    rounded = (bits + 0x7FFF + ((bits >> 16) & 1)) >> 16
    # NaN must stay NaN: rounding its mantissa could carry it into infinity.
    quiet_nan = (bits >> 16) | 0x0040
    return xp.where(xp.isnan(values), quiet_nan, rounded).astype(xp.uint16)


def as_float(values: Array, dtype: str) -> Array:
    """The values as a float array to measure errors in (float64 stays float64, halves widen)."""
    xp = array_module(values)
    if dtype == "bfloat16":
        return bfloat16_bits_to_float32(values)
    if dtype == "float16":
        return values.astype(xp.float32)
    if dtype in INTEGER_DTYPES:
        return values.astype(xp.float64)
    return values


def poisoned_elements(values: Array, poison_byte: int) -> Array:
    """Mask of elements whose every byte is still `poison_byte`."""
    xp = array_module(values)
    flat = xp.ascontiguousarray(values).reshape(-1)
    itemsize = flat.dtype.itemsize
    as_bytes = flat.view(xp.uint8).reshape(flat.size, itemsize)
    return (as_bytes == poison_byte).all(axis=1).reshape(values.shape)


def _same_bits(first: Array, second: Array) -> Array:
    """Elementwise bit equality (NaN equals the same NaN), through an unsigned view of each element."""
    xp = array_module(first)
    unsigned = {1: xp.uint8, 2: xp.uint16, 4: xp.uint32, 8: xp.uint64}[first.dtype.itemsize]
    return xp.ascontiguousarray(first).view(unsigned) == xp.ascontiguousarray(second).view(unsigned)


def _bad_mask(actual: Array, expected: Array, tolerance: Tolerance, dtype: str) -> Array:
    """allclose per element: |a - e| <= atol + rtol*|e|; a NaN expected needs a NaN; inf must match."""
    xp = array_module(actual)
    if dtype in INTEGER_DTYPES and _exact(tolerance):
        return actual != expected
    if dtype in INTEGER_DTYPES:  # a written tolerance (a rounding that may land on either neighbour)
        a, e = actual.astype(xp.float64), expected.astype(xp.float64)
        return xp.abs(a - e) > tolerance.atol + tolerance.rtol * xp.abs(e)
    a, e = as_float(actual, dtype), as_float(expected, dtype)
    with np.errstate(invalid="ignore", over="ignore"):
        close = xp.abs(a - e) <= tolerance.atol + tolerance.rtol * xp.abs(e)
        ok = xp.where(xp.isnan(e), xp.isnan(a), xp.where(xp.isfinite(e), close & xp.isfinite(a), a == e))
    return ~ok


def _exact(tolerance: Tolerance) -> bool:
    """Whether an integer output must match exactly: no tolerance of a whole unit or more written."""
    return tolerance.atol < 1 and tolerance.rtol == 0


def _scalar(values: Array, flat_index: int, dtype: str) -> float:
    element = values.reshape(-1)[flat_index : flat_index + 1]
    return float(as_float(element, dtype)[0])


def _first_index(mask: Array, shape: tuple[int, ...]) -> tuple[int, int | tuple[int, ...]]:
    """Flat and multi-index (in the argument's own shape) of the first True element."""
    xp = array_module(mask)
    flat = int(xp.argmax(mask.reshape(-1).view(xp.uint8)))  # argmax over bytes: bool is not everywhere
    return flat, tuple(int(i) for i in np.unravel_index(flat, shape))


def _errors(actual: Array, expected: Array, bad: Array, dtype: str) -> tuple[float | None, float | None, int]:
    """Largest absolute and relative error over the bad elements where both are finite; count of the rest."""
    xp = array_module(actual)
    a, e = as_float(actual, dtype), as_float(expected, dtype)
    with np.errstate(invalid="ignore", over="ignore", divide="ignore"):
        diff = xp.abs(a.astype(xp.float64) - e.astype(xp.float64))
        finite = bad & xp.isfinite(diff)
        nonfinite = int((bad & ~xp.isfinite(diff)).sum())
        if not bool(finite.any()):
            return None, None, nonfinite
        max_abs = float(xp.where(finite, diff, 0.0).max())
        rel = xp.where(finite & (e != 0), diff / xp.abs(e.astype(xp.float64)), 0.0)
        return max_abs, float(rel.max()), nonfinite


def _fmt(value: float | None) -> str:
    return "n/a" if value is None else f"{value:.4g}"


def _mismatch_failure(
    check: CheckName,
    actual: Array,
    expected: Array,
    bad: Array,
    dtype: str,
    argument: str | None,
    describe: str,
    values: tuple[str, str],
) -> CheckFailure:
    count = int(bad.sum())
    flat, index = _first_index(bad, tuple(actual.shape))
    max_abs, max_rel, nonfinite = _errors(actual, expected, bad, dtype)
    want, got = _scalar(expected, flat, dtype), _scalar(actual, flat, dtype)
    errors = f"max abs error {_fmt(max_abs)}, max rel error {_fmt(max_rel)}"
    if nonfinite:
        errors += f", {nonfinite} NaN/inf where the other is not"
    message = (
        f"{argument or 'output'}: {count} of {actual.size} elements {describe} ({errors}); "
        f"first at {index}: {values[0]} {want!r}, {values[1]} {got!r}"
    )
    return CheckFailure(
        check=check,
        message=message,
        argument=argument,
        bad_elements=count,
        total_elements=int(actual.size),
        max_abs_error=max_abs,
        max_rel_error=max_rel,
        first_bad_index=index,
        expected=want,
        actual=got,
    )


def compare_output(
    actual: Array,
    expected: Array,
    tolerance: Tolerance,
    dtype: str,
    *,
    argument: str | None = None,
    ignore: Array | None = None,
) -> CheckFailure | None:
    """The output against the oracle's. `ignore` masks elements the oracle itself never wrote."""
    bad = _bad_mask(actual, expected, tolerance, dtype)
    if ignore is not None:
        bad &= ~ignore
    if not bool(bad.any()):
        return None
    exact = dtype in INTEGER_DTYPES and _exact(tolerance)
    limits = "differ (integers must match exactly)" if exact else (
        f"differ beyond atol={tolerance.atol:g}, rtol={tolerance.rtol:g}"
    )  # fmt: skip
    return _mismatch_failure("mismatch", actual, expected, bad, dtype, argument, limits, ("expected", "got"))


def check_deterministic(
    first_run: Array,
    second_run: Array,
    tolerance: Tolerance,
    dtype: str,
    *,
    argument: str | None = None,
    ignore: Array | None = None,
) -> CheckFailure | None:
    """Two runs on the same inputs must agree: exactly for integers, within tolerance for floats (atomics
    add in a different order each run). Disagreement means a race or a read of uninitialised memory."""
    if dtype in INTEGER_DTYPES:  # an integer kernel run twice agrees exactly, whatever the oracle's slack
        tolerance = Tolerance(0.0, 0.0)
    bad = _bad_mask(second_run, first_run, tolerance, dtype) & ~_same_bits(first_run, second_run)
    if ignore is not None:
        bad &= ~ignore
    if not bool(bad.any()):
        return None
    return _mismatch_failure(
        "nondeterministic",
        second_run,
        first_run,
        bad,
        dtype,
        argument,
        "differ between two runs on the same inputs (a race, or a read of memory nothing wrote?)",
        ("first run", "second run"),
    )


def unwritten_elements(
    first_run: Array,
    second_run: Array,
    first_poison: int,
    second_poison: int,
    *,
    argument: str | None = None,
    ignore: Array | None = None,
) -> CheckFailure | None:
    """Elements the kernel did not write, from two runs on the same inputs whose outputs were poisoned
    with different bytes beforehand.

    Never written: the element holds the poison in both runs. A value that happens to equal one pattern
    cannot hold the other too, so a correct kernel never trips this. Written in one run only: the element
    holds its run's poison in one run and something else in the other (a kernel that skips work on a
    repeated launch, e.g. a result cached by pointer).
    """
    in_first = poisoned_elements(first_run, first_poison)
    in_second = poisoned_elements(second_run, second_poison)
    never = in_first & in_second
    once = (in_first ^ in_second) & ~_same_bits(first_run, second_run)
    if ignore is not None:
        never &= ~ignore
        once &= ~ignore
    never_count, once_count = int(never.sum()), int(once.sum())
    if never_count == 0 and once_count == 0:
        return None
    bad = never | once
    _, index = _first_index(bad, tuple(first_run.shape))
    parts = []
    if never_count:
        parts.append(
            f"{never_count} of {first_run.size} elements were never written "
            f"(they still hold the poison bytes 0x{first_poison:02X} and 0x{second_poison:02X} of two runs)"
        )
    if once_count:
        parts.append(
            f"{once_count} elements were written in only one of two runs on the same inputs "
            "(work skipped on a repeated launch: a result cached across calls?)"
        )
    return CheckFailure(
        check="unwritten",
        message=f"{argument or 'output'}: " + "; ".join(parts) + f"; first at {index}",
        argument=argument,
        bad_elements=never_count + once_count,
        total_elements=int(first_run.size),
        first_bad_index=index,
    )


def timed_runs_to_replay(poisoned_per_run: Array, per_poison: int = 2) -> list[int]:
    """Which timed runs to replay for the unwritten check: timed runs alternate two poison bytes (even and
    odd runs), and per byte the `per_poison` runs with the most elements still holding it are the ones
    where skipped work would show."""
    counts = np.asarray(poisoned_per_run)
    chosen: list[int] = []
    for parity in (0, 1):
        runs = np.arange(parity, len(counts), 2)
        ranked = runs[np.argsort(-counts[runs], kind="stable")][:per_poison]
        chosen += [int(run) for run in ranked if counts[run] > 0]
    return sorted(chosen)


def unexplained_poison(timed_count: int, replayed_counts: tuple[int, int]) -> int:
    """Elements of a timed run's outputs that held its poison beyond chance (more than 0: unwritten).

    A correct value equals a fixed bit pattern by chance (thousands of times among 2^27 fp16 outputs), so
    the count is set against the same kernel's own values on the same inputs, counted in two replays whose
    outputs were poisoned with the other byte: the larger of the two, plus their difference as a margin
    for a kernel whose float atomics round differently from run to run."""
    first, second = replayed_counts
    return timed_count - (max(first, second) + abs(first - second))


def check_unchanged(
    before: Array, after: Array, *, argument: str | None = None, dtype: str | None = None
) -> CheckFailure | None:
    """An input must hold, bit for bit, what it held before the launch (unless declared inout)."""
    bad = ~_same_bits(before, after)
    if not bool(bad.any()):
        return None
    count = int(bad.sum())
    flat, index = _first_index(bad, tuple(before.shape))
    shown = dtype or str(before.dtype)
    was, now = _scalar(before, flat, shown), _scalar(after, flat, shown)
    return CheckFailure(
        check="input_modified",
        message=(
            f"{argument or 'input'}: the kernel changed {count} of {before.size} elements of an input "
            f"that is not declared inout; first at {index}: was {was!r}, now {now!r}"
        ),
        argument=argument,
        bad_elements=count,
        total_elements=int(before.size),
        first_bad_index=index,
        expected=was,
        actual=now,
    )


def check_guards(
    raw_bytes: Array, guard_pattern: int, guard_len: int, *, argument: str | None = None
) -> CheckFailure | None:
    """The guard regions of one allocation (`guard_len` bytes before and after the data) must still hold
    `guard_pattern`: any other byte there was written out of bounds."""
    xp = array_module(raw_bytes)
    data_len = int(raw_bytes.size) - 2 * guard_len
    head_bad = xp.flatnonzero(raw_bytes[:guard_len] != guard_pattern)  # a guard is small: indices are cheap
    tail_bad = xp.flatnonzero(raw_bytes[guard_len + data_len :] != guard_pattern)
    head_count, tail_count = int(head_bad.size), int(tail_bad.size)
    if head_count == 0 and tail_count == 0:
        return None
    parts = []
    first_offset = 0  # bytes from the start of the data, negative before it
    if head_count:
        farthest, nearest = guard_len - int(head_bad[0]), guard_len - int(head_bad[-1])
        parts.append(
            f"{head_count} bytes changed before the start (from {farthest} to {nearest} bytes before it)"
        )
        first_offset = -farthest
    if tail_count:
        first, last = int(tail_bad[0]), int(tail_bad[-1])
        parts.append(
            f"{tail_count} bytes changed after the end (from byte +{first} to +{last} past the last "
            f"of its {data_len} bytes)"
        )
        if not head_count:
            first_offset = data_len + first
    return CheckFailure(
        check="out_of_bounds",
        message=f"{argument or 'buffer'}: out-of-bounds write: " + "; ".join(parts),
        argument=argument,
        bad_elements=head_count + tail_count,
        first_bad_index=(first_offset,),
    )
