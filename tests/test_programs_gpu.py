"""Whole programs with no spec written, on a real GPU: `cuda-agent optimize --write` as a user types it,
then the written program built with nvcc (no new warning) and run (it exits as the original did), its
launches reading back as the ones measured. The figures of more programs: bench/programs_bench.py.

    python -m pytest -m gpu tests/test_programs_gpu.py -s
"""

from __future__ import annotations

import os
from pathlib import Path

import pytest

from bench.programs_bench import bench_program

pytestmark = pytest.mark.gpu


@pytest.mark.parametrize("program", ["saxpy_stream", "rmsnorm_rows"])
def test_optimize_write_gives_a_program_that_builds_and_runs_as_before(program: str, tmp_path: Path) -> None:
    row = bench_program(program, tmp_path, budget_s=15.0)
    log = (tmp_path / program / "optimize.txt").read_text()
    line = f"{program}: {row.speedups} written {row.changed} rc {row.original_rc}/{row.rewritten_rc}"
    print(line)
    if os.environ.get("OUT"):
        with open(Path(os.environ["OUT"]) / "figures.txt", "a") as out:
            out.write(line + "\n")
    assert row.kernels, log[-3000:]  # every kernel got a verdict: its spec came from the program
    assert row.rewritten_built and not row.new_warnings, (tmp_path / program / "build.txt").read_text()[
        -3000:
    ]
    assert row.original_rc == row.rewritten_rc, (tmp_path / program / "run.txt").read_text()
    if row.speedups:
        assert row.changed, "a verified faster rewrite was reported but the file was not written"
