"""Repository mode on the terminal: one progress display for the whole run, and the summary table."""

from __future__ import annotations

import threading
from collections.abc import Sequence
from datetime import datetime
from pathlib import Path

from rich.console import Console
from rich.markup import escape
from rich.progress import BarColumn, Progress, TaskID, TextColumn, TimeElapsedColumn
from rich.table import Table

from cuda_agent import __version__
from cuda_agent.agent.engine import Progress as JobProgress
from cuda_agent.agent.repository import FileRun, KernelRun
from cuda_agent.agent.rewrite import unified_diff
from cuda_agent.agent.search import SearchBudget
from cuda_agent.html_report import KernelEntry, Page, ceilings_of, entry
from cuda_agent.sandbox.reports import DeviceInfo


def place(run: KernelRun, relative: Path) -> str:
    return f"{relative}:{run.line + 1}"


class LiveProgress:
    """The run's bar (kernels done of all, how many running, the best speedups so far) and a line per
    kernel being optimized. Called from the run's threads; rich's Progress takes updates from any thread."""

    def __init__(self, console: Console, total: int, relative: object) -> None:
        self._relative = relative
        self._bar = Progress(
            TextColumn("[bold]{task.description}"), BarColumn(), TextColumn("{task.completed}/{task.total}"),
            TextColumn("{task.fields[note]}"), TimeElapsedColumn(), console=console, transient=True,
        )  # fmt: skip
        self._overall = self._bar.add_task("kernels", total=total, note="")
        self._lines: dict[int, TaskID] = {}
        self._best: list[tuple[float, str]] = []
        self._running = 0
        self._lock = threading.Lock()

    def __enter__(self) -> LiveProgress:
        self._bar.__enter__()
        return self

    def __exit__(self, *exc: object) -> None:
        self._bar.__exit__(None, None, None)

    def started(self, run: KernelRun) -> None:
        with self._lock:
            self._running += 1
            self._lines[id(run)] = self._bar.add_task(f"  {run.kernel}", total=None, note="baseline")
            self._update_overall()

    def progressed(self, run: KernelRun, progress: JobProgress) -> None:
        line = self._lines.get(id(run))
        if line is not None:
            note = f"best {progress.best_speedup:.2f}×"
            self._bar.update(line, total=progress.total or None, completed=progress.done, note=note)

    def finished(self, run: KernelRun) -> None:
        with self._lock:
            line = self._lines.pop(id(run), None)
            if line is not None:
                self._running -= 1
                self._bar.remove_task(line)
            if run.speedup is not None:
                self._best = sorted([*self._best, (run.speedup, run.kernel)], reverse=True)[:3]
            self._bar.advance(self._overall)
            self._update_overall()

    def _update_overall(self) -> None:
        best = ", ".join(f"{name} {speedup:.2f}×" for speedup, name in self._best)
        note = f"{self._running} running" + (f" · best: {best}" if best else "")
        self._bar.update(self._overall, note=note)


def status_of(run: KernelRun) -> str:
    if run.skipped:
        return "no spec"
    outcome = run.outcome
    if outcome is None:
        return "not run"
    if not outcome.baseline.usable:
        return "failed"
    return "faster" if outcome.best is not None else "no gain"


STYLES = {"faster": "bold green", "no gain": "yellow", "failed": "red", "no spec": "dim", "not run": "dim"}


def summary_table(runs: Sequence[FileRun], relative: object) -> Table:
    """A row a kernel: where, what happened, the times, the speedup and the change."""
    table = Table(title="repository run", title_justify="left")
    for column, justify in [
        ("kernel", "left"), ("status", "left"), ("original", "right"), ("best", "right"),
        ("speedup", "right"), ("change", "left"),
    ]:  # fmt: skip
        table.add_column(column, justify=justify)  # type: ignore[arg-type]
    for file_run in runs:
        for run in file_run.kernels:
            status = status_of(run)
            outcome = run.outcome
            original = best_ms = speedup = ""
            change = escape(run.skipped) if run.skipped else ""
            if outcome is not None:
                timing = outcome.baseline.timing
                original = f"{timing.median_ms:.3f} ms" if timing else ""
                best = outcome.best
                if best is not None and best.comparison is not None and best.speedup is not None:
                    best_ms = f"{best.comparison.candidate.median_ms:.3f} ms"
                    speedup = f"{best.speedup:.2f}×"
                    change = escape(best.candidate.description)
                elif not change:
                    change = escape(outcome.explanation.split(";")[0])
            cached = " (cached)" if run.cached else ""
            where = escape(place(run, relative(file_run.path)))  # type: ignore[operator]
            table.add_row(
                f"{escape(run.kernel)}\n[dim]{where}[/]", f"[{STYLES[status]}]{status}[/]{cached}",
                original, best_ms, speedup, change,
            )  # fmt: skip
    return table


def totals_line(runs: Sequence[FileRun], seconds: float, where: str) -> str:
    kernels = [k for r in runs for k in r.kernels]
    faster = [k for k in kernels if status_of(k) == "faster"]
    cached = sum(1 for k in kernels if k.cached)
    return (
        f"{len(kernels)} kernels in {len(runs)} files: {len(faster)} faster, "
        f"{sum(1 for k in kernels if status_of(k) == 'no gain')} no gain, "
        f"{sum(1 for k in kernels if status_of(k) == 'failed')} failed, "
        f"{sum(1 for k in kernels if k.skipped)} without a spec; {cached} from the cache; "
        f"{seconds:.1f} s on {where}"
    )


def report_page(
    runs: Sequence[FileRun], gpu: DeviceInfo, totals: str, budget: SearchBudget, proposers: Sequence[str],
    relative: object,
) -> Page:  # fmt: skip
    """The run as an HTML report's page; each kernel's diff is against the text it was optimized on."""
    kernels: list[KernelEntry] = []
    for file_run in runs:
        for run in file_run.kernels:
            where = place(run, relative(file_run.path))  # type: ignore[operator]
            status = status_of(run)
            outcome = run.outcome
            if outcome is None:
                kernels.append(KernelEntry(run.kernel, where, status, explanation=run.skipped))
                continue
            best = outcome.best
            diff = ""
            if best is not None:
                diff = unified_diff(
                    outcome.baseline.target.source, best.candidate.source, str(relative(file_run.path))
                )  # type: ignore[operator]
            kernels.append(entry(run.kernel, where, status, outcome, diff, run.cached, gpu))
    copy_gbs, peak = ceilings_of(gpu)
    stamp = datetime.now().astimezone().isoformat(timespec="seconds")
    facts = (
        f"{stamp} · cuda-agent {__version__}",
        f"search budget {budget.seconds:g} s and {budget.candidates} candidates a kernel; proposers: "
        + ", ".join(proposers),
    )
    return Page("cuda-agent: repository run", gpu.name, copy_gbs, peak, facts, (totals,), tuple(kernels))
