"""Host launches follow a rewrite's new launch: written in the call's own terms, compiled by nvcc (host
code included), and left alone when the spec's sizes cannot be stated at the call."""

from __future__ import annotations

import shutil
import subprocess
from pathlib import Path

import pytest
from cuda_agent.agent.optimize import PROPOSERS
from cuda_agent.agent.targets import KernelTarget, load_targets

ROOT = Path(__file__).resolve().parents[1]
ROW_SUM = (ROOT / "bench" / "kernels" / "row_sum.cu").read_text()
LAUNCHER = """
void launch_row_sum(const float* x, float* out, int rows, int cols, cudaStream_t stream)
{
    row_sum<<<(rows + 255) / 256, 256, 0, stream>>>(x, out, rows, cols);
}

void launch_twice(const float* x, float* out, int n_rows, int width)
{
    row_sum<<<(n_rows + 255) / 256, 256>>>(x, out, n_rows / 2, width);
    row_sum<<<1, 32>>>(x + 100, out + 1, 1, width);
}
"""
needs_nvcc = pytest.mark.skipif(shutil.which("nvcc") is None, reason="nvcc is not installed")


def target(tmp_path: Path, text: str) -> KernelTarget:
    path = tmp_path / "row_sum.cu"
    path.write_text(text)
    found = load_targets(path).find("row_sum")
    assert found is not None and found.spec is not None
    return found


def launches(text: str) -> list[str]:
    return [line.strip() for line in text.splitlines() if "<<<" in line]


@needs_nvcc
def test_an_idiom_rewrite_rewrites_every_launch_of_the_kernel_in_its_terms(tmp_path: Path) -> None:
    original = target(tmp_path, ROW_SUM + LAUNCHER)
    candidate = PROPOSERS["rewrite:warp-per-output"](original)[0]  # a warp a row: 8 rows a 256-thread block
    assert launches(candidate.source) == [
        "row_sum<<<(rows + 8 - 1) / 8, 256, 0, stream>>>(x, out, rows, cols);",
        "row_sum<<<((n_rows / 2) + 8 - 1) / 8, 256>>>(x, out, n_rows / 2, width);",
        # One row: its grid of 1 is already the new launch's, only the block changes.
        "row_sum<<<1, 256>>>(x + 100, out + 1, 1, width);",
    ]
    path = tmp_path / "rewritten.cu"
    path.write_text(candidate.source)
    done = subprocess.run(
        ["nvcc", "-c", "-o", str(tmp_path / "out.o"), str(path)], capture_output=True, text=True
    )
    assert done.returncode == 0, done.stderr


def test_a_capped_grid_and_a_launch_that_keeps_its_block(tmp_path: Path) -> None:
    original = target(tmp_path, ROW_SUM + LAUNCHER)
    capped = next(c for c in PROPOSERS["grid-stride"](original) if "one wave" in c.description)
    assert launches(capped.source)[0] == (
        "row_sum<<<(((rows + 256 - 1) / 256) < 1056 ? ((rows + 256 - 1) / 256) : 1056), 256, 0, stream>>>"
        "(x, out, rows, cols);"
    )
    # A change inside the kernel alone (same launch) leaves every call as the user wrote it.
    (restricted,) = PROPOSERS["restrict"](original)
    assert launches(restricted.source) == launches(original.source)


def test_a_launch_is_left_alone_when_the_call_does_not_carry_a_size(tmp_path: Path) -> None:
    # The grid needs `rows`; this spec's rows is not passed to the kernel (it reads a fixed-size matrix).
    text = ROW_SUM.replace('rows = { role = "scalar", dtype = "int32", value = "rows" }', "")
    text = text.replace("float* out, int rows, int cols)", "float* out, int cols)").replace(
        "if (row >= rows) return;", "if (row >= 65536) return;"
    )
    text += "\nvoid go(const float* x, float* out) { row_sum<<<256, 256>>>(x, out, 1024); }\n"
    original = target(tmp_path, text)
    candidates = PROPOSERS["grid-stride"](original)
    assert candidates and all(launches(c.source)[-1].startswith("void go(") for c in candidates)
    assert all("row_sum<<<256, 256>>>(x, out, 1024);" in c.source for c in candidates)
