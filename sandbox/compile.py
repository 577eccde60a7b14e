"""Compile a kernel to a cubin: NVRTC first, nvcc where NVRTC cannot. Runs in the caller, no GPU needed.

INTERFACE ONLY (being implemented).
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Literal

from cuda_agent.sandbox.reports import CompileResult


def compile_kernel(
    source: str,
    kernel: str,
    *,
    filename: str = "kernel.cu",
    arch: str = "sm_90",
    include_dirs: Sequence[str] = (),
    flags: Sequence[str] = (),
    backend: Literal["auto", "nvrtc", "nvcc"] = "auto",
) -> CompileResult:
    """Compile `source` and return the cubin of `kernel` (a name expression: "relu", "reduce<float, 256>")."""
    raise NotImplementedError
