"""The command line, run as a user runs it: the real console script, real compilers, no GPU."""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

from tests.conftest import gpu_unavailable_reason

ROOT = Path(__file__).resolve().parents[1]
EXAMPLES = ROOT / "examples"
needs_no_gpu = pytest.mark.skipif(gpu_unavailable_reason() is None, reason="these check the no-GPU behaviour")


def run(
    *args: str, cwd: Path = ROOT, cache: Path | None = None, recording: Path | None = None
) -> subprocess.CompletedProcess[str]:
    env = dict(os.environ, COLUMNS="160", CUDA_AGENT_CACHE_DIR=str(cache or ROOT / ".pytest-cache-dir"))
    if recording is not None:  # the GPU's answers from a recording (tests/recordings), as the server tests do
        env["CUDA_AGENT_RECORDED_WORKER"] = str(recording)
    return subprocess.run(
        [sys.executable, "-m", "cuda_agent", *args],
        capture_output=True,
        text=True,
        cwd=cwd,
        env=env,
        timeout=120,
        check=False,
    )


@needs_no_gpu
def test_check_without_gpu_still_compiles_and_says_why_it_stops(tmp_path: Path) -> None:
    result = run("check", str(EXAMPLES / "elementwise.cu"), cache=tmp_path)
    assert result.returncode == 0, result.stdout + result.stderr
    assert "No GPU" in result.stdout
    assert "relu" in result.stdout and "saxpy" in result.stdout
    assert "nvrtc sm_90" in result.stdout
    assert "Traceback" not in result.stderr


@needs_no_gpu
def test_host_headers_fall_back_to_nvcc(tmp_path: Path) -> None:
    result = run("check", str(EXAMPLES / "softmax.cu"), cache=tmp_path)
    assert result.returncode == 0, result.stdout + result.stderr
    assert "nvcc sm_90" in result.stdout


@pytest.mark.skipif(shutil.which("nvcc") is None, reason="nvcc is not installed")
@needs_no_gpu
def test_compile_error_is_reported_on_its_line(tmp_path: Path) -> None:
    bad = tmp_path / "bad.cu"
    bad.write_text(
        "__global__ void scale(const float* x, float* y, int n)\n"
        "{\n"
        "    int i = blockIdx.x * blockDim.x + threadIdx.x;\n"
        "    if (i < n) y[i] = 2.0f * xx[i];\n"
        "}\n"
    )
    result = run("check", str(bad), cache=tmp_path)
    assert result.returncode == 1
    assert "bad.cu:4" in result.stdout
    assert "xx" in result.stdout


@pytest.mark.skipif(shutil.which("nvcc") is None, reason="nvcc is not installed")
@needs_no_gpu
def test_a_kernel_with_a_syntax_error_and_no_spec_shows_the_compilers_error(tmp_path: Path) -> None:
    """Compiling needs no spec: `check` said only "no spec: the kernel has syntax errors" before."""
    bad = tmp_path / "broken.cu"
    bad.write_text("__global__ void broken(float* p, int n) {\n  int i = threadIdx.x\n  p[i] = 1.0f;\n}\n")
    result = run("check", str(bad), cache=tmp_path)
    assert "broken: not checked: no spec" in result.stdout
    assert "broken.cu:3:3: error:" in result.stdout, result.stdout  # the missing ';' before line 3
    assert result.returncode == 1
    assert "Traceback" not in result.stderr


@needs_no_gpu
def test_a_file_where_no_kernel_could_be_checked_exits_non_zero(tmp_path: Path) -> None:
    """A kernel no spec could be inferred for compiles fine, but nothing was checked: scripts must see it."""
    odd = tmp_path / "odd.cu"
    odd.write_text(
        "__global__ void scatter(const float* src, const int* idx, float* dst, float alpha, double beta) {\n"
        "  dst[idx[threadIdx.x]] = alpha * src[threadIdx.x] + (float)beta;\n}\n"
    )
    result = run("check", str(odd), cache=tmp_path)
    assert "scatter: not checked: no spec" in result.stdout
    assert "compile nvrtc" in result.stdout  # it was compiled all the same
    assert "no kernel could be checked" in " ".join(result.stderr.split())
    assert result.returncode == 1


def test_missing_file_is_one_clear_line(tmp_path: Path) -> None:
    result = run("check", str(tmp_path / "nope.cu"), cache=tmp_path)
    assert result.returncode == 2
    assert "nope.cu: no such file" in result.stderr
    assert "Traceback" not in result.stderr


def test_unknown_kernel_lists_the_ones_there(tmp_path: Path) -> None:
    result = run("check", str(EXAMPLES / "elementwise.cu"), "--kernel", "gelu", cache=tmp_path)
    assert result.returncode == 2
    assert "no kernel named 'gelu' (kernels: relu, saxpy)" in result.stderr


def test_spec_error_names_file_line_and_column(tmp_path: Path) -> None:
    source = (
        (EXAMPLES / "transpose.cu")
        .read_text()
        .replace('dtype = "float32", shape = ["cols"', 'dtype = "flaot32", shape = ["cols"')
    )
    bad = tmp_path / "transpose.cu"
    bad.write_text(source)
    line = next(i for i, text in enumerate(source.splitlines(), 1) if "flaot32" in text)
    column = source.splitlines()[line - 1].index('"flaot32"') + 1
    result = run("check", str(bad), cache=tmp_path)
    assert result.returncode != 0
    assert f"transpose.cu:{line}:{column}:" in result.stderr
    assert "float32" in result.stderr  # the suggestion
    assert "Traceback" not in result.stderr


@needs_no_gpu
def test_doctor_without_gpu_reports_the_toolchain(tmp_path: Path) -> None:
    result = run("doctor", cache=tmp_path)
    assert result.returncode == 1
    assert "NVRTC: 13." in result.stdout
    assert "GPU:" in result.stdout


RECORDING = ROOT / "tests" / "recordings" / "elementwise_h200.json"


def test_write_keeps_the_files_crlf_line_endings(tmp_path: Path) -> None:
    path = tmp_path / "elementwise.cu"
    path.write_bytes((EXAMPLES / "elementwise.cu").read_bytes().replace(b"\n", b"\r\n"))
    result = run("optimize", str(path), "--kernel", "saxpy", "--write", cache=tmp_path, recording=RECORDING)
    assert result.returncode == 0, result.stdout + result.stderr
    written = path.read_bytes()
    assert b"block = [256]\r\n" in written  # the rewrite is in
    assert written.count(b"\n") == written.count(b"\r\n")  # and every line still ends in CRLF


def test_write_leaves_a_file_that_is_not_utf8_untouched(tmp_path: Path) -> None:
    path = tmp_path / "elementwise.cu"
    original = (EXAMPLES / "elementwise.cu").read_bytes().replace(b"// ", b"// \xff ", 1)
    path.write_bytes(original)
    result = run("optimize", str(path), "--kernel", "saxpy", "--write", cache=tmp_path, recording=RECORDING)
    assert result.returncode == 1
    assert "not writing" in result.stderr and "not valid UTF-8" in result.stderr
    assert "block = [256]" in result.stdout  # the rewrite is still shown
    assert path.read_bytes() == original
