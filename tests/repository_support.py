"""A small repository of kernels for the repository-mode and pool tests, laid out as people lay them out:
sources in folders, a header kernel, a whole program, build output and old code that `.gitignore` files
leave out (at the root and in a subfolder, with a negation)."""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
KERNELS = Path(__file__).parent / "repository_kernels"
RECORDING = Path(__file__).parent / "recordings" / "repository_h200.json"
# What the recording makes of each kernel: its status and the speedup of the best rewrite.
EXPECTED = {
    "leaky_relu_forward": ("faster", 1.2),
    "daxpy": ("faster", 80 / 60),
    "add_bias": ("faster", 25 / 18),
    "clamp_inplace": ("no gain", None),
}
TAKEN = {"src/activations.cu", "src/blas/axpy.cu", "src/bias_program.cu", "include/clamp.cuh", "keep_tmp.cu"}


def make_repository(root: Path) -> Path:
    """The repository under `root`/repo; its taken files are TAKEN (keep_tmp.cu is a copy of axpy.cu)."""
    repo = root / "repo"
    (repo / ".git").mkdir(parents=True)  # the root the .gitignore files are read from
    (repo / "src" / "blas").mkdir(parents=True)
    (repo / "include").mkdir()
    places = {"activations.cu": "src", "axpy.cu": "src/blas", "bias_program.cu": "src"}
    places["clamp.cuh"] = "include"
    for name, where in places.items():
        shutil.copy(KERNELS / name, repo / where / name)
    (repo / ".gitignore").write_text("build/\n*_tmp.cu\n!keep_tmp.cu\n")
    (repo / "src" / ".gitignore").write_text("old/\n")
    for ignored in ["build/generated.cu", "src/old/legacy.cu", "src/scratch_tmp.cu"]:
        (repo / ignored).parent.mkdir(parents=True, exist_ok=True)
        shutil.copy(KERNELS / "axpy.cu", repo / ignored)
    shutil.copy(KERNELS / "axpy.cu", repo / "keep_tmp.cu")
    (repo / "src" / "notes.txt").write_text("not a source\n")
    return repo


def cli(
    *args: str, cwd: Path, cache: Path, recording: Path = RECORDING, env: dict[str, str] | None = None
) -> subprocess.CompletedProcess[str]:
    """The real console script, with the GPU's answers from a recording."""
    environment = dict(
        os.environ, COLUMNS="200", CUDA_AGENT_CACHE_DIR=str(cache), CUDA_AGENT_RECORDED_WORKER=str(recording)
    )
    environment.update(env or {})
    return subprocess.run(
        [sys.executable, "-m", "cuda_agent", *args],
        capture_output=True, text=True, cwd=cwd, env=environment, timeout=300, check=False,
    )  # fmt: skip


class Quiet:
    """A repository run's listener that shows nothing (agent/repository.py's RunListener)."""

    def started(self, run: object) -> None: ...

    def progressed(self, run: object, progress: object) -> None: ...

    def finished(self, run: object) -> None: ...


def slow_recording(folder: Path, run_s: float) -> Path:
    """The recording with every answer taking `run_s`, as a GPU's runs would: a run lasts seconds."""
    data = json.loads(RECORDING.read_text())
    for kernel in data["kernels"].values():
        kernel["run_s"] = run_s
    path = folder / "slow.json"
    path.write_text(json.dumps(data))
    return path
