"""Compile a kernel to a cubin: NVRTC first, nvcc where NVRTC cannot. Runs in the caller, no GPU needed.

Safe to call from several threads at once: each call owns its NVRTC program and temporary folder.
Nothing is cached here; results are cached by the agent, keyed on source, flags and GPU.

Fallback (backend="auto"): NVRTC first (~50 ms in process). If it fails, for whatever reason, nvcc
gets the file (~0.3 s; it has host headers, <cstdio>, INFINITY). The first success is the result. If
both fail, nvcc's diagnostics are reported, as its SARIF output carries columns; NVRTC's only when
nvcc is not installed. Flags that only nvcc takes (--expt-relaxed-constexpr, --extended-lambda) skip
NVRTC; those of the host compiler (-Xcompiler, -ccbin) NVRTC leaves out (sandbox/nvrtc.py).
"""

from __future__ import annotations

import hashlib
import os
import time
from collections.abc import Sequence
from dataclasses import replace
from typing import Literal, NamedTuple

from cuda_agent.sandbox.cubin import cubin_entry_names
from cuda_agent.sandbox.nvcc import compile_with_nvcc, find_nvcc
from cuda_agent.sandbox.nvrtc import (
    NvrtcError,
    compile_with_nvrtc,
    nvrtc_rejects,
    nvrtc_unavailable_reason,
)
from cuda_agent.sandbox.reports import CompileDiagnostic, CompileResult

Backend = Literal["auto", "nvrtc", "nvcc"]


def compile_kernel(
    source: str,
    kernel: str,
    *,
    filename: str = "kernel.cu",
    arch: str = "sm_90",
    include_dirs: Sequence[str] = (),
    flags: Sequence[str] = (),
    backend: Backend = "auto",
) -> CompileResult:
    """Compile `source` and return the cubin of `kernel` (a name expression: "relu", "reduce<float, 256>").

    `filename` is the user's file: diagnostics in it carry that name. `include_dirs` are searched for
    `#include "..."`; pass the file's own folder, as the source is compiled from memory or a temp folder
    (a relative one is made absolute here, against the current directory: nvcc runs in a temp folder).
    `flags` are passed to the compiler, one argument each ("-O3", "--use_fast_math", "-lineinfo").
    Never raises for bad CUDA: errors come back as `CompileResult(ok=False, diagnostics=...)`.
    """
    start = time.perf_counter()
    if not kernel.strip():
        return CompileResult(False, None, (CompileDiagnostic("error", "no kernel name given"),), backend)
    options = _Options(filename, arch, tuple(os.path.abspath(d) for d in include_dirs), tuple(flags))
    attempts: list[CompileResult] = []
    missing: list[str] = []  # why a backend that was asked for could not run

    if backend in ("auto", "nvrtc"):
        # Flags only nvcc takes (--expt-relaxed-constexpr) send the file there at once: NVRTC would refuse.
        reason = nvrtc_unavailable_reason() or nvrtc_rejects(flags)
        if reason is None:
            attempts.append(_nvrtc_attempt(source, kernel, options))
        else:
            missing.append(reason)
    if backend == "nvcc" or (backend == "auto" and not (attempts and attempts[0].ok)):
        nvcc = find_nvcc()
        if nvcc is not None:
            attempts.append(compile_with_nvcc(source, kernel, nvcc=nvcc, **options._asdict()))
        else:
            missing.append("nvcc was not found (PATH, CUDA_HOME, CUDA_PATH, /usr/local/cuda)")

    if not attempts:
        diagnostic = CompileDiagnostic("error", "Cannot compile CUDA here: " + "; ".join(missing))
        return CompileResult(False, None, (diagnostic,), backend, time.perf_counter() - start)
    # The first success, else the last failure: nvcc's when it ran (its diagnostics have columns).
    chosen = next((a for a in attempts if a.ok), attempts[-1])
    return _finish(_require_entry(chosen), source, attempts, time.perf_counter() - start)


class _Options(NamedTuple):
    """What both backends take besides the source and the kernel name."""

    filename: str
    arch: str
    include_dirs: tuple[str, ...]
    flags: tuple[str, ...]


def _nvrtc_attempt(source: str, kernel: str, options: _Options) -> CompileResult:
    try:
        return compile_with_nvrtc(source, kernel, **options._asdict())
    except NvrtcError as exc:  # a broken NVRTC install: nvcc may still work, so report and go on
        return CompileResult(
            False, None, (CompileDiagnostic("error", f"NVRTC: {exc}"),), "nvrtc", 0.0, str(exc)
        )


def _require_entry(result: CompileResult) -> CompileResult:
    """Fail a result whose symbol is not a __global__ kernel (a __device__ function compiles, cannot run)."""
    compiled = result.kernel
    if compiled is None or compiled.lowered_name in cubin_entry_names(compiled.cubin):
        return result
    message = f"{compiled.name!r} is not a __global__ kernel (symbol {compiled.lowered_name})"
    return replace(
        result, ok=False, kernel=None, diagnostics=(*result.diagnostics, CompileDiagnostic("error", message))
    )


def _finish(
    chosen: CompileResult, source: str, attempts: list[CompileResult], seconds: float
) -> CompileResult:
    """Total time, every attempt's log (why nvcc was needed stays readable), and the source digest."""
    log = (
        "\n".join(f"--- {a.backend} ({a.seconds:.3f} s) ---\n{a.log}" for a in attempts)
        if len(attempts) > 1
        else chosen.log
    )
    kernel = chosen.kernel
    if kernel is not None:
        kernel = replace(kernel, source_sha256=hashlib.sha256(source.encode()).hexdigest())
    return replace(chosen, kernel=kernel, seconds=seconds, log=log)
