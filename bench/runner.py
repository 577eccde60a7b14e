"""Run the suite: each kernel through `optimize()` within its budget, then the PyTorch reference.

Shared by `python -m bench` and `cuda-agent bench`. Turns the engine's results into the plain
`KernelResult`s of bench/report.py at once, so the report never sees engine types.
"""

from __future__ import annotations

import datetime
import time
from collections.abc import Sequence
from pathlib import Path

from cuda_agent.agent.analysis import analysed
from cuda_agent.agent.engine import Engine, Progress
from cuda_agent.agent.optimize import PROPOSERS, OptimizeOutcome, optimize
from cuda_agent.agent.targets import KernelTarget
from cuda_agent.sandbox.protocol import TorchTimingResult
from cuda_agent.sandbox.reports import WorkerError
from rich.console import Console
from rich.markup import escape

from bench.report import COLUMNS, BenchRun, KernelResult, rich_table, row, run_summary_lines, write
from bench.suite import ALL, UnknownKernel, load_suite, suite_of
from cuda_agent import __version__

DEFAULT_BUDGET_S = 180.0
DEFAULT_OUT = Path(__file__).resolve().parent / "results"


def _optimize_within(
    engine: Engine, target: KernelTarget, proposers: tuple[str, ...], budget_s: float
) -> tuple[OptimizeOutcome, float | None, float]:
    """optimize() within the budget; returns the outcome, the seconds to its first verified improvement
    (from the Progress reports) and the total seconds."""
    start = time.perf_counter()
    first: list[float] = []

    def on_progress(progress: Progress) -> None:
        if not first and progress.best_speedup > 1.0:
            first.append(time.perf_counter() - start)

    outcome = optimize(engine, target, proposers, on_progress=on_progress, budget_s=budget_s)
    return outcome, (first[0] if first else None), time.perf_counter() - start


def kernel_result(
    target: KernelTarget,
    outcome: OptimizeOutcome,
    torch: TorchTimingResult | WorkerError,
    first_improvement_s: float | None,
    search_s: float,
) -> KernelResult:
    baseline = outcome.baseline
    problem = baseline.problems[0].label if baseline.problems else ""
    common = {
        "kernel": target.kernel.name,
        "file": target.path.name,
        "suite": suite_of(target.path),
        "problem": problem,
        "search_s": search_s,
        "candidates": len(outcome.results),
        "verified": sum(r.verified for r in outcome.results),
        "explanation": outcome.explanation,
        "analysis": analysis_of(target),
    }
    if isinstance(torch, WorkerError):
        common.update(torch_note=f"not timed: {torch.message}")
    else:
        common.update(
            torch_eager_ms=torch.eager.median_ms if torch.eager else None,
            torch_compile_ms=torch.compiled.median_ms if torch.compiled else None,
            torch_note=torch.note,
        )
    if baseline.timing is None:
        return KernelResult(original_ms=None, error=outcome.explanation, **common)  # type: ignore[arg-type]
    flops = baseline.problems[0].flops if baseline.problems else 0
    moved = baseline.problems[0].bytes_moved if baseline.problems else 0
    common["intensity"] = flops / moved if flops and moved else None
    best = outcome.best
    if best is None or best.comparison is None:
        return KernelResult(
            original_ms=baseline.timing.median_ms,
            roofline_before=baseline.timing.roofline_fraction,
            before_gbs=baseline.timing.bandwidth_gbs,
            before_gflops=_gflops(flops, baseline.timing.median_ms),
            **common,  # type: ignore[arg-type]
        )
    # Both times from the same interleaved measurement, so the speedup is the one the decision used.
    comparison = best.comparison
    return KernelResult(
        original_ms=comparison.baseline.median_ms,
        best_ms=comparison.candidate.median_ms,
        speedup=comparison.speedup,
        roofline_before=comparison.baseline.roofline_fraction,
        roofline_after=comparison.candidate.roofline_fraction,
        before_gbs=comparison.baseline.bandwidth_gbs,
        after_gbs=comparison.candidate.bandwidth_gbs,
        before_gflops=_gflops(flops, comparison.baseline.median_ms),
        after_gflops=_gflops(flops, comparison.candidate.median_ms),
        first_improvement_s=first_improvement_s,
        best_description=best.candidate.description,
        **common,  # type: ignore[arg-type]
    )


def _gflops(flops: int, ms: float) -> float | None:
    return flops / (ms * 1e-3) / 1e9 if flops and ms > 0 else None


def analysis_of(target: KernelTarget) -> str:
    """One line of what the analysis read in the original kernel, for the report ("" where it cannot)."""
    found = analysed(target)
    return found[1].describe() if found is not None else ""


def run_bench(
    engine: Engine,
    names: Sequence[str] | None = None,
    budget_s: float = DEFAULT_BUDGET_S,
    out: Path | None = DEFAULT_OUT,
    proposers: Sequence[str] | None = None,
    console: Console | None = None,
    suite: str = ALL,
) -> int:
    """The bench over a suite ("classic", "outside" or "all"): 0 when it ran, 1 without a GPU, 2 for an
    unknown kernel name."""
    console = console or Console(highlight=False)
    try:
        targets = load_suite(names, suite)
    except UnknownKernel as exc:
        console.print(f"[red]{escape(str(exc))}[/]")
        return 2
    device = engine.device()
    if isinstance(device, WorkerError):
        console.print(
            f"[yellow]No GPU: {escape(device.message)}[/]\n"
            "The bench optimizes and times kernels on a GPU: run it on a machine with an NVIDIA GPU."
        )
        return 1
    chosen = tuple(proposers or PROPOSERS)
    unknown = [p for p in chosen if p not in PROPOSERS]
    if unknown:
        console.print(f"[red]unknown proposer {', '.join(unknown)} (proposers: {', '.join(PROPOSERS)})[/]")
        return 2
    started = datetime.datetime.now().astimezone().isoformat(timespec="seconds")
    results: list[KernelResult] = []

    ceilings = device.ceilings

    def run_so_far() -> BenchRun:
        return BenchRun(
            device.name, started, __version__, budget_s, chosen, tuple(results),
            copy_gbs=ceilings.copy_bandwidth_gbs if ceilings else None,
            peak_tflops=ceilings.flops_tflops.get("float32") if ceilings else None,
        )  # fmt: skip

    for number, target in enumerate(targets, 1):
        if target.spec is None:
            name, file = target.kernel.name, target.path.name
            results.append(KernelResult(name, file, "", None, error=target.note, suite=suite_of(target.path)))
            continue
        with console.status(f"[{number}/{len(targets)}] {target.kernel.name}: searching…"):
            outcome, first, search_s = _optimize_within(engine, target, chosen, budget_s)
        with console.status(
            f"[{number}/{len(targets)}] {target.kernel.name}: timing torch eager and compile…"
        ):
            torch = engine.time_torch(outcome.baseline) if outcome.baseline.problems else None
        result = kernel_result(target, outcome, torch or TorchTimingResult(None, None, ""), first, search_s)
        results.append(result)
        cells = dict(zip(COLUMNS, row(result), strict=True))
        console.print(
            f"[bold]{target.kernel.name}[/]: {cells['speedup']} ({cells['original']} → {cells['best']}), "
            f"torch.compile {cells['torch.compile']}, first gain {cells['first gain']}, "
            f"search {cells['search']}: {escape(outcome.explanation)}"
        )
        if out is not None:  # after every kernel: a run stopped part-way keeps what it measured
            write(run_so_far(), out)
    run = run_so_far()
    console.print(rich_table(run))
    for line in run_summary_lines(run):
        console.print(line)
    if out is not None:
        json_path, markdown_path, html_path = write(run, out)
        console.print(f"wrote {json_path}, {markdown_path.name} and {html_path.name}")
    return 0
