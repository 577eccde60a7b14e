"""Whole programs with no spec written: `cuda-agent optimize --write`, then the rewritten program run.

    python -m bench.programs_bench [--programs rmsnorm_rows softmax_argv ...] [--budget-s 40] [--out DIR]

For each program of tests/programs/ (a copy, in its own folder under --out): build it with nvcc and run it
as it is; `cuda-agent optimize FILE --write` as a user would type it (the specs inferred from the program's
own launches, at its real sizes); build and run the written file. Prints one row a kernel (the measured
speedup the optimizer reported, at the program's sizes) and one a program (both builds, both runs' exit
codes, new compiler warnings), and writes the logs and a JSON of the table under --out. A program whose
rewritten build fails, warns anew or exits otherwise than the original is a failure (exit code 1).
"""

from __future__ import annotations

import argparse
import difflib
import json
import os
import re
import shutil
import subprocess
import sys
import time
from collections.abc import Sequence
from dataclasses import asdict, dataclass, field
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
PROGRAMS = ROOT / "tests" / "programs"
DEFAULT = ("rmsnorm_rows", "softmax_argv", "saxpy_stream", "attention_causal", "conv1d_tiled")
RUN_TIMEOUT_S = 300


@dataclass
class Built:
    ok: bool
    warnings: list[str]
    log: str


@dataclass
class Ran:
    returncode: int
    seconds: float
    tail: str


@dataclass
class ProgramRow:
    program: str
    kernels: dict[str, str] = field(default_factory=dict)  # kernel -> the optimizer's verdict line
    speedups: dict[str, float] = field(default_factory=dict)
    optimize_rc: int = 0
    optimize_s: float = 0.0
    original_built: bool = False
    rewritten_built: bool = False
    new_warnings: list[str] = field(default_factory=list)
    original_rc: int | None = None
    rewritten_rc: int | None = None
    changed: bool = False
    notes: list[str] = field(default_factory=list)  # what the optimizer said the file alone does not carry

    @property
    def passed(self) -> bool:
        return (
            self.original_built
            and self.rewritten_built
            and not self.new_warnings
            and self.original_rc == self.rewritten_rc
        )


def build(source: Path, binary: Path) -> Built:
    done = subprocess.run(
        ["nvcc", "-O3", "-arch=sm_90", "-Xcompiler", "-Wall", "-o", str(binary), source.name],
        capture_output=True, text=True, cwd=source.parent, check=False,
    )  # fmt: skip
    warnings = sorted({line.split(": ", 1)[-1] for line in done.stderr.splitlines() if "warning" in line})
    return Built(done.returncode == 0, warnings, done.stdout + done.stderr)


def run(binary: Path) -> Ran:
    started = time.perf_counter()
    try:
        done = subprocess.run(
            [str(binary)],
            capture_output=True,
            text=True,
            cwd=binary.parent,
            timeout=RUN_TIMEOUT_S,
            check=False,
        )
    except subprocess.TimeoutExpired:
        return Ran(124, time.perf_counter() - started, "timed out")
    output = (done.stdout + done.stderr).strip().splitlines()
    return Ran(done.returncode, time.perf_counter() - started, "\n".join(output[-6:]))


VERDICT = re.compile(r"^(?P<kernel>\w+): (?P<text>.*)$")
SPEEDUP = re.compile(r"(\d+(?:\.\d+)?)× faster")


def optimize(source: Path, budget_s: float, log: Path) -> tuple[int, float, dict[str, str]]:
    """`cuda-agent optimize FILE --write` in the file's folder; the verdict line of each kernel."""
    started = time.perf_counter()
    done = subprocess.run(
        [sys.executable, "-m", "cuda_agent", "optimize", source.name, "--write", "--budget-s", str(budget_s)],
        capture_output=True, text=True, cwd=source.parent, check=False,
        env={**os.environ, "COLUMNS": "400", "NO_COLOR": "1"},
    )  # fmt: skip
    seconds = time.perf_counter() - started
    log.write_text(done.stdout + "\n--- stderr ---\n" + done.stderr, encoding="utf-8")
    verdicts = {}
    for line in done.stdout.splitlines():
        match = VERDICT.match(line.strip())
        if match and ("faster" in match["text"] or "no candidate" in match["text"]):
            verdicts[match["kernel"]] = match["text"]
    return done.returncode, seconds, verdicts


def bench_program(name: str, out: Path, budget_s: float) -> ProgramRow:
    folder = out / name
    shutil.rmtree(folder, ignore_errors=True)
    folder.mkdir(parents=True)
    for file in PROGRAMS.glob(f"{name}.*"):
        if not file.name.endswith(".expected.toml"):
            shutil.copy(file, folder / file.name)
    source = folder / f"{name}.cu"
    original_text = source.read_text()
    row = ProgramRow(name)
    original = build(source, folder / "original")
    row.original_built = original.ok
    if original.ok:
        row.original_rc = run(folder / "original").returncode
    row.optimize_rc, row.optimize_s, row.kernels = optimize(source, budget_s, folder / "optimize.txt")
    for kernel, text in row.kernels.items():
        match = SPEEDUP.search(text)
        if match:
            row.speedups[kernel] = float(match.group(1))
    row.changed = source.read_text() != original_text
    written = difflib.unified_diff(
        original_text.splitlines(keepends=True),
        source.read_text().splitlines(keepends=True),
        f"a/{name}.cu",
        f"b/{name}.cu",
    )
    (folder / "write.diff").write_text("".join(written))
    row.notes = [
        line.strip().removeprefix("note: ")
        for line in (folder / "optimize.txt").read_text().splitlines()
        if line.strip().startswith("note: ")
    ]
    rewritten = build(source, folder / "rewritten")
    row.rewritten_built = rewritten.ok
    row.new_warnings = sorted(set(rewritten.warnings) - set(original.warnings))
    (folder / "build.txt").write_text(original.log + "\n--- rewritten ---\n" + rewritten.log)
    if rewritten.ok:
        ran = run(folder / "rewritten")
        row.rewritten_rc = ran.returncode
        (folder / "run.txt").write_text(ran.tail)
    return row


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m bench.programs_bench", description=__doc__)
    parser.add_argument("--programs", nargs="+", default=list(DEFAULT))
    parser.add_argument("--budget-s", type=float, default=40.0, help="search budget a kernel")
    parser.add_argument("--out", type=Path, default=Path("bench-programs"))
    args = parser.parse_args(argv)
    rows = [bench_program(name, args.out, args.budget_s) for name in args.programs]
    print(f"{'program':18s} {'kernel':32s} verdict")
    for row in rows:
        for kernel, text in row.kernels.items():
            print(f"{row.program:18s} {kernel:32s} {text[:140]}")
        state = "ok" if row.passed else "FAILED"
        print(
            f"{row.program:18s} {'(program)':32s} {state}: written {row.changed}, builds "
            f"{row.original_built}/{row.rewritten_built}, runs rc {row.original_rc}/{row.rewritten_rc}, "
            f"new warnings {row.new_warnings or 'none'}, optimize {row.optimize_s:.0f} s"
        )
        for note in row.notes:
            print(f"{row.program:18s} {'(note)':32s} {note[:160]}")
    speedups = [s for row in rows for s in row.speedups.values()]
    if speedups:
        geomean = 1.0
        for s in speedups:
            geomean *= s
        print(f"{len(speedups)} kernels faster, geomean {geomean ** (1 / len(speedups)):.2f}× over them")
    args.out.mkdir(parents=True, exist_ok=True)
    (args.out / "programs.json").write_text(json.dumps([asdict(r) for r in rows], indent=2))
    return 0 if all(row.passed for row in rows) else 1


if __name__ == "__main__":
    sys.exit(main())
