"""No persisting L2 lines in the worker (worker side; the CUDA driver API through cuda-bindings).

L2 lines marked persisting are kept in a set-aside part of L2 that an ordinary flush does not evict, and
the driver sets one aside by default (11.25 MiB of the H200's 60 MiB, read there): a candidate that loads
its inputs with an `L2::evict_last` cache policy (PTX `createpolicy`, no host code needed) could then find
the next run's freshly drawn inputs in L2 after the flush. The worker sets the set-aside to zero for its
context, where a kernel cannot change it, and resets any persisting line before each timing request.
"""

from __future__ import annotations

from cuda.bindings import driver

_LIMIT = driver.CUlimit.CU_LIMIT_PERSISTING_L2_CACHE_SIZE


def _check(result: tuple, what: str) -> tuple:
    if result[0] != driver.CUresult.CUDA_SUCCESS:
        raise RuntimeError(f"{what} failed: {result[0]!r}")
    return result[1:]


def persisting_l2_bytes() -> int:
    """The current context's persisting set-aside, in bytes."""
    (value,) = _check(driver.cuCtxGetLimit(_LIMIT), "cuCtxGetLimit(PERSISTING_L2_CACHE_SIZE)")
    return int(value)


def disable_persisting_l2() -> None:
    """Set the current context's persisting set-aside to zero and turn every persisting line normal."""
    _check(driver.cuCtxSetLimit(_LIMIT, 0), "cuCtxSetLimit(PERSISTING_L2_CACHE_SIZE, 0)")
    _check(driver.cuCtxResetPersistingL2Cache(), "cuCtxResetPersistingL2Cache")
