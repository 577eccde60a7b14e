"""GPU tests run only where CuPy sees a GPU; elsewhere they are skipped with the reason shown."""

from __future__ import annotations

import functools
import os
import tempfile
from pathlib import Path

import pytest

# Every candidate the CLI evaluates is logged; a command run outside any workspace logs to the user data dir:
# a scratch log for the tests' commands instead (set before the tests build their processes' environments).
SCRATCH_LOG = Path(tempfile.gettempdir()) / "cuda-agent-test-feedback" / "feedback.jsonl"
os.environ.setdefault("CUDA_AGENT_FEEDBACK_LOG", str(SCRATCH_LOG))


@functools.cache
def gpu_unavailable_reason() -> str | None:
    try:
        import cupy
    except ImportError:
        return "no GPU: CuPy is not installed (pip install 'cuda-agent[gpu]' on a machine with an NVIDIA GPU)"
    try:
        count = cupy.cuda.runtime.getDeviceCount()
    except Exception as exc:  # CUDARuntimeError without a driver
        return f"no GPU: {exc}"
    return None if count > 0 else "no GPU: CUDA reports no devices"


def pytest_collection_modifyitems(config: pytest.Config, items: list[pytest.Item]) -> None:
    reason = gpu_unavailable_reason()
    if reason is None:
        return
    skip = pytest.mark.skip(reason=reason)
    for item in items:
        if "gpu" in item.keywords:
            item.add_marker(skip)


@pytest.fixture(scope="session")
def sandbox():  # type: ignore[no-untyped-def]
    """One GPU worker (and its standby) for all GPU tests; 5 s without a heartbeat is a hung kernel."""
    from cuda_agent.sandbox.client import Sandbox

    with Sandbox(timeout_s=5.0) as shared:
        yield shared
