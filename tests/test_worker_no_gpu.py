"""What the worker says on a machine without a usable GPU: the user reads it in the editor and the CLI.

CuPy on a machine with no NVIDIA driver raises CUDA's "driver version is insufficient for CUDA runtime
version", which reads like a version mismatch to fix. The only stand-in here is that CuPy (the GPU boundary
CI cannot reach): a module whose runtime raises what CUDA raises there."""

from __future__ import annotations

import sys
import types

import pytest
from cuda_agent.sandbox.worker import _start_cuda


class CUDARuntimeError(RuntimeError):
    pass


def driverless_cupy() -> types.ModuleType:
    def device_count() -> int:
        raise CUDARuntimeError(
            "cudaErrorInsufficientDriver: CUDA driver version is insufficient for CUDA runtime version"
        )

    cupy = types.ModuleType("cupy")
    cupy.cuda = types.SimpleNamespace(runtime=types.SimpleNamespace(getDeviceCount=device_count))  # type: ignore[attr-defined]
    return cupy


def test_no_driver_is_named_as_such(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setitem(sys.modules, "cupy", driverless_cupy())
    cupy, error = _start_cuda(0)
    assert cupy is None and error is not None and error.kind == "no_gpu"
    assert error.message.startswith("no NVIDIA GPU with a working driver was found")
    assert "driver version is insufficient" in error.message  # CUDA's words kept, for a search


def test_without_cupy_the_message_says_what_to_install(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setitem(sys.modules, "cupy", None)  # import cupy raises ImportError
    cupy, error = _start_cuda(0)
    assert cupy is None and error is not None and error.kind == "no_gpu"
    assert "cuda-agent[gpu]" in error.message
