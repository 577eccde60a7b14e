"""`cuda-agent bench` and `python -m bench` on a machine without a GPU: a plain message, exit 1."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest

from tests.conftest import gpu_unavailable_reason

ROOT = Path(__file__).resolve().parents[1]
needs_no_gpu = pytest.mark.skipif(gpu_unavailable_reason() is None, reason="these check the no-GPU behaviour")


def run(args: list[str], cwd: Path, tmp_path: Path) -> subprocess.CompletedProcess[str]:
    env = dict(os.environ, COLUMNS="160", CUDA_AGENT_CACHE_DIR=str(tmp_path / "cache"))
    return subprocess.run(
        [sys.executable, *args], capture_output=True, text=True, cwd=cwd, env=env, timeout=120, check=False
    )


@needs_no_gpu
@pytest.mark.parametrize("command", [["-m", "cuda_agent", "bench"], ["-m", "bench"]])
def test_bench_without_gpu_says_so_and_exits_1(command: list[str], tmp_path: Path) -> None:
    # cuda-agent from another folder: it finds the suite in its own checkout.
    cwd = tmp_path if command[1] == "cuda_agent" else ROOT
    result = run([*command, "--kernels", "gelu", "--out", str(tmp_path / "out")], cwd, tmp_path)
    assert result.returncode == 1, result.stdout + result.stderr
    assert "No GPU" in result.stdout and "run it on a machine with an NVIDIA GPU" in result.stdout
    assert "Traceback" not in result.stderr
    assert not (tmp_path / "out").exists()


def test_unknown_kernel_is_named(tmp_path: Path) -> None:
    result = run(["-m", "bench", "--kernels", "nope"], ROOT, tmp_path)
    assert result.returncode == 2
    assert "no bench kernel named nope" in result.stdout and "gelu" in result.stdout
