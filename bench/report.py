"""The bench table: plain per-kernel results, the summary figures, and their rich / Markdown / JSON forms.

Nothing here touches the GPU: the runner fills `KernelResult`s, this module only reads them, so tests build
them by hand.
"""

from __future__ import annotations

import dataclasses
import json
import math
import re
import statistics
from collections.abc import Sequence
from dataclasses import dataclass, field
from pathlib import Path

from rich.table import Table

from cuda_agent.html_report import KernelEntry, Page, Point, render


@dataclass(frozen=True)
class KernelResult:
    """One kernel of the suite after its search. Times in milliseconds, durations in seconds."""

    kernel: str
    file: str
    problem: str  # the benchmark size, "rows=65536 cols=1024"
    original_ms: float | None  # None: the original could not be timed (see error)
    best_ms: float | None = None  # the best verified rewrite; None when nothing was faster
    speedup: float = 1.0  # original / best, 1.0 when nothing was faster
    roofline_before: float | None = None  # fraction of the binding ceiling
    roofline_after: float | None = None
    torch_eager_ms: float | None = None
    torch_compile_ms: float | None = None
    first_improvement_s: float | None = None  # from the start of the search; None: never improved
    search_s: float = 0.0
    candidates: int = 0
    verified: int = 0
    best_description: str = ""
    explanation: str = ""  # the optimizer's sentence: why this is the answer
    torch_note: str = ""
    error: str = ""  # why the kernel could not be benchmarked
    suite: str = "classic"  # bench/suite.py's suite; runs written before there were two are all classic
    analysis: str = ""  # what agent/analysis/ found in the original (thread mapping, loops, coalescing)
    # Where the original and the best sit on the roofline (the HTML page's charts); None: not measured.
    before_gbs: float | None = None
    after_gbs: float | None = None
    before_gflops: float | None = None
    after_gflops: float | None = None
    intensity: float | None = None  # FLOP per byte of compulsory traffic, when FLOPs are counted

    @property
    def final_ms(self) -> float | None:
        """The time the user ends up with: the best rewrite's, else the original's."""
        return self.best_ms if self.best_ms is not None else self.original_ms

    @property
    def vs_torch_compile(self) -> float | None:
        """torch.compile time / our final time: above 1 means we are faster."""
        if self.final_ms is None or self.torch_compile_ms is None or self.final_ms <= 0:
            return None
        return self.torch_compile_ms / self.final_ms


@dataclass(frozen=True)
class Summary:
    kernels: int
    timed: int  # kernels whose original could be timed
    improved: int
    geomean_speedup: float | None  # over the originals, kernels that did not improve count as 1.0
    geomean_vs_torch_compile: float | None  # over kernels with a torch.compile time
    at_least_torch_compile: int  # kernels as fast as or faster than torch.compile
    # kernels within TIE of torch.compile or faster: two kernels at the same bandwidth ceiling differ by
    # the timing noise alone, so the strict count above says little about such a pair
    within_tie_of_torch_compile: int
    with_torch_compile: int
    median_first_improvement_s: float | None  # kernels that never improved count as never (inf)


ALL_SUITES = "all suites"  # the label of a run's summary over every suite in it
TIE = 0.03  # a kernel within 3% of torch.compile ties with it: the spread of repeated medians on one GPU


@dataclass(frozen=True)
class BenchRun:
    gpu: str
    started: str  # ISO 8601, local time with offset
    version: str
    budget_s: float
    proposers: tuple[str, ...]
    results: tuple[KernelResult, ...]
    notes: tuple[str, ...] = field(default_factory=tuple)
    copy_gbs: float | None = None  # the GPU's measured ceilings, for the HTML page's charts
    peak_tflops: float | None = None  # float32

    @property
    def summary(self) -> Summary:
        return summarize(self.results)

    @property
    def suites(self) -> tuple[str, ...]:
        """The suites of the results, in the order they first appear."""
        return tuple(dict.fromkeys(r.suite for r in self.results))

    def summaries(self) -> list[tuple[str, Summary]]:
        """Each suite's summary, then all of them together, labelled; only the one when the run holds a
        single suite."""
        parts = [(suite, summarize([r for r in self.results if r.suite == suite])) for suite in self.suites]
        if len(parts) != 1:
            parts.append((ALL_SUITES, self.summary))
        return parts


def geometric_mean(values: Sequence[float]) -> float | None:
    positive = [v for v in values if v > 0 and math.isfinite(v)]
    if not positive:
        return None
    return math.exp(sum(math.log(v) for v in positive) / len(positive))


def summarize(results: Sequence[KernelResult]) -> Summary:
    timed = [r for r in results if r.original_ms is not None]
    compared = [r for r in timed if r.vs_torch_compile is not None]
    # The conservative median: a kernel that never improved has an infinite time to its first improvement.
    firsts = [r.first_improvement_s if r.first_improvement_s is not None else math.inf for r in timed]
    median_first = statistics.median(firsts) if firsts else None
    return Summary(
        kernels=len(results),
        timed=len(timed),
        improved=sum(r.best_ms is not None for r in timed),
        geomean_speedup=geometric_mean([r.speedup for r in timed]),
        geomean_vs_torch_compile=geometric_mean([r.vs_torch_compile or 0.0 for r in compared]),
        at_least_torch_compile=sum((r.vs_torch_compile or 0.0) >= 1.0 for r in compared),
        within_tie_of_torch_compile=sum((r.vs_torch_compile or 0.0) >= 1.0 - TIE for r in compared),
        with_torch_compile=len(compared),
        median_first_improvement_s=median_first,
    )


# -- text ----------------------------------------------------------------------------------------------

COLUMNS = (
    "kernel", "original", "best", "speedup", "roofline", "torch eager", "torch.compile",
    "vs compile", "first gain", "search", "suite", "best change",
)  # fmt: skip
TEXT_COLUMNS = ("kernel", "suite", "best change")  # left-aligned; the others are figures


def _ms(value: float | None) -> str:
    return "—" if value is None else f"{value:.3f} ms"


def _fraction(value: float | None) -> str:
    return "—" if value is None else f"{value:.0%}"


def _seconds(value: float | None) -> str:
    if value is None or not math.isfinite(value):
        return "never"
    return f"{value:.1f} s"


def _times(value: float | None) -> str:
    return "—" if value is None else f"{value:.2f}×"


def row(result: KernelResult) -> tuple[str, ...]:
    """One kernel as the table's cells (the same in the terminal and in Markdown)."""
    if result.original_ms is None:
        return (result.kernel, "—", "—", "—", "—", _ms(result.torch_eager_ms), _ms(result.torch_compile_ms),
                "—", "—", _seconds(result.search_s), result.suite, f"not run: {result.error}")  # fmt: skip
    roofline = (
        f"{_fraction(result.roofline_before)} → {_fraction(result.roofline_after or result.roofline_before)}"
    )
    return (
        result.kernel,
        _ms(result.original_ms),
        _ms(result.best_ms),
        _times(result.speedup),
        roofline,
        _ms(result.torch_eager_ms),
        _ms(result.torch_compile_ms),
        _times(result.vs_torch_compile),
        _seconds(result.first_improvement_s) if result.best_ms is not None else "never",
        _seconds(result.search_s),
        result.suite,
        result.best_description or result.explanation,
    )


def summary_lines(summary: Summary, budget_s: float) -> list[str]:
    return [
        f"kernels: {summary.kernels} ({summary.timed} timed, {summary.improved} improved), "
        f"budget {budget_s:.0f} s a kernel",
        f"geometric-mean speedup over the originals: {_times(summary.geomean_speedup)} "
        "(a kernel with no verified improvement counts 1.00×)",
        f"geometric-mean speedup over torch.compile: {_times(summary.geomean_vs_torch_compile)} "
        f"({summary.with_torch_compile} kernels with a torch.compile time)",
        f"as fast as or faster than torch.compile: {summary.at_least_torch_compile} of "
        f"{summary.with_torch_compile} ({summary.within_tie_of_torch_compile} within {TIE:.0%}, "
        "the timing noise)",
        f"median time to the first verified improvement: {_seconds(summary.median_first_improvement_s)} "
        "(kernels never improved count as never)",
    ]


def _section_title(label: str, summary: Summary) -> str:
    return f"{label} ({summary.kernels} kernels)" if label == ALL_SUITES else f"{label} suite"


def run_summary_lines(run: BenchRun) -> list[str]:
    """The summary for the terminal: each suite's lines under its name, then all suites together."""
    lines: list[str] = []
    for label, summary in run.summaries():
        lines.append(f"[bold]{_section_title(label, summary)}[/]")
        lines += [f"  {line}" for line in summary_lines(summary, run.budget_s)]
    return lines


def rich_table(run: BenchRun) -> Table:
    table = Table(title=f"cuda-agent bench · {run.gpu} · {run.started[:16]}", title_justify="left")
    for name in COLUMNS:
        table.add_column(name, justify="left" if name in TEXT_COLUMNS else "right",
                         overflow="fold", max_width=48 if name == "best change" else None)  # fmt: skip
    for result in run.results:
        table.add_row(*row(result))
    return table


def _markdown_cell(text: str) -> str:
    return text.replace("|", "\\|").replace("\n", " ")


def to_markdown(run: BenchRun) -> str:
    lines = [
        f"# cuda-agent bench: {run.gpu}",
        "",
        f"{run.started} · cuda-agent {run.version} · budget {run.budget_s:.0f} s a kernel · "
        f"proposers: {', '.join(run.proposers) or 'default'}",
        "",
        "| " + " | ".join(COLUMNS) + " |",
        "|" + "|".join("---" if c in TEXT_COLUMNS else "---:" for c in COLUMNS) + "|",
    ]
    lines += ["| " + " | ".join(_markdown_cell(c) for c in row(r)) + " |" for r in run.results]
    for label, summary in run.summaries():
        lines += ["", f"**{_section_title(label, summary)}**", ""]
        lines += [f"- {line}" for line in summary_lines(summary, run.budget_s)]
    details = [r for r in run.results if r.explanation or r.torch_note or r.error or r.analysis]
    if details:
        lines += ["", "## Per kernel", ""]
        for r in details:
            lines.append(f"- **{r.kernel}** ({r.file}, {r.problem}): {r.error or r.explanation}")
            if r.analysis:
                lines.append(f"  - analysis: {r.analysis}")
            if r.torch_note:
                lines.append(f"  - torch: {r.torch_note}")
    lines += [f"- {note}" for note in run.notes]
    return "\n".join(lines) + "\n"


def _finite(value: object) -> object:
    """JSON has no infinity: never-improved medians are written as null."""
    return None if isinstance(value, float) and not math.isfinite(value) else value


def _summary_json(summary: Summary) -> dict[str, object]:
    return {k: _finite(v) for k, v in dataclasses.asdict(summary).items()}


def to_json(run: BenchRun) -> str:
    """The run, its summary over every kernel (`summary`) and each suite's (`suites`)."""
    suites = {suite: _summary_json(s) for suite, s in run.summaries() if suite != ALL_SUITES}
    payload = {**dataclasses.asdict(run), "summary": _summary_json(run.summary), "suites": suites}
    return json.dumps(payload, indent=2, sort_keys=False) + "\n"


def from_json(text: str) -> BenchRun:
    """A run written by `to_json`, for comparing versions. Results without a suite (runs written before
    the outside suite) are classic."""
    data = json.loads(text)
    data.pop("summary", None)
    data.pop("suites", None)
    results = tuple(KernelResult(**r) for r in data.pop("results"))
    return BenchRun(**{**data, "proposers": tuple(data["proposers"]), "notes": tuple(data["notes"])},
                    results=results)  # fmt: skip


def merge(runs: Sequence[BenchRun]) -> BenchRun:
    """Runs of parts of the suite (split to fit a machine's time limit) as one table: a kernel measured in
    several keeps its last result. The runs must be of one GPU and one budget, else the table would lie."""
    if not runs:
        raise ValueError("no runs to merge")
    for field_name in ("gpu", "budget_s", "proposers"):
        values = {getattr(r, field_name) for r in runs}
        if len(values) > 1:
            raise ValueError(f"runs differ in {field_name}: {', '.join(map(str, sorted(values, key=str)))}")
    by_kernel = {(r.suite, r.file, r.kernel): r for run in runs for r in run.results}
    first = min(runs, key=lambda r: r.started)
    notes = tuple(sorted({n for run in runs for n in run.notes}))
    results = tuple(sorted(by_kernel.values(), key=lambda r: (r.suite, r.file)))
    return dataclasses.replace(first, results=results, notes=notes)


def result_stem(run: BenchRun) -> str:
    """`2026-11-03T1412_NVIDIA-H200`: sorts by date, says the GPU, safe in every file system."""
    stamp = run.started[:16].replace(":", "")
    gpu = re.sub(r"[^A-Za-z0-9.]+", "-", run.gpu).strip("-") or "unknown-gpu"
    return f"{stamp}_{gpu}"


def to_html(run: BenchRun) -> str:
    """The run as the same kind of page as `cuda-agent optimize --report` (cuda_agent/html_report.py)."""
    entries = []
    for r in run.results:
        status = "failed" if r.error else "faster" if r.best_ms is not None else "no gain"
        before = Point(r.before_gbs, r.before_gflops, r.intensity, r.roofline_before)
        after = Point(r.after_gbs, r.after_gflops, r.intensity, r.roofline_after) if r.best_ms else None
        entries.append(
            KernelEntry(
                r.kernel,
                f"{r.suite}/{r.file} ({r.problem})",
                status,
                r.original_ms,
                r.best_ms,
                r.speedup if r.best_ms is not None else None,
                r.best_description,
                r.explanation or r.error,
                before if r.original_ms is not None else None,
                after,
                torch_eager_ms=r.torch_eager_ms,
                torch_compile_ms=r.torch_compile_ms,
            )
        )
    facts = (
        f"{run.started} · cuda-agent {run.version}",
        f"budget {run.budget_s:g} s a kernel; proposers: {', '.join(run.proposers)}",
        *run.notes,
    )
    return render(
        Page(f"cuda-agent bench: {run.gpu}", run.gpu, run.copy_gbs, run.peak_tflops, facts,
             tuple(run_summary_lines(run)), tuple(entries))
    )  # fmt: skip


def write(run: BenchRun, folder: Path) -> tuple[Path, Path, Path]:
    """The run's JSON (to compare and merge), Markdown (to read in the repository) and HTML page."""
    folder.mkdir(parents=True, exist_ok=True)
    stem = result_stem(run)
    json_path, markdown_path, html_path = (folder / f"{stem}.{kind}" for kind in ("json", "md", "html"))
    json_path.write_text(to_json(run), encoding="utf-8")
    markdown_path.write_text(to_markdown(run), encoding="utf-8")
    html_path.write_text(to_html(run), encoding="utf-8")
    return json_path, markdown_path, html_path
