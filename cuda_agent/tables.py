"""Rich renderings of the engine's plain results, for the command line."""

from __future__ import annotations

from rich.markup import escape
from rich.table import Table
from rich.text import Text

from cuda_agent.agent.candidates import CandidateResult
from cuda_agent.agent.engine import Baseline
from cuda_agent.sandbox.reports import (
    CheckFailure,
    CompileResult,
    DeviceInfo,
    TimingReport,
    VerificationReport,
)

STATUS_STYLE = {
    "faster": "bold green",
    "no gain": "yellow",
    "slower": "yellow",
    "verified": "green",
    "rejected": "bold red",
    "compile error": "red",
    "timeout": "red",
    "crash": "red",
    "cuda error": "red",
}


def compile_line(result: CompileResult) -> str:
    if not result.ok or result.kernel is None:
        return f"[red]failed[/] ({result.backend or 'no compiler'}, {len(result.errors)} error(s))"
    kernel, res = result.kernel, result.kernel.resources
    parts = [f"{kernel.backend} {kernel.arch}", f"{result.seconds:.2f} s"]
    if res.registers is not None:
        parts.append(f"{res.registers} registers")
    if res.shared_bytes is not None:
        parts.append(f"{res.shared_bytes} B static shared")
    if res.stack_bytes:
        parts.append(f"{res.stack_bytes} B stack")
    if (spills := res.spilled_bytes) is not None:
        parts.append(f"[yellow]{spills} B spilled[/]" if spills else "no spills")
    return ", ".join(parts)


def failure_line(failure: CheckFailure) -> str:
    where = [f"problem {failure.problem}"] if failure.problem else []
    if failure.seed is not None:
        where.append(f"seed {failure.seed}")
    detail = []
    if failure.bad_elements is not None and failure.total_elements:
        detail.append(f"{failure.bad_elements:,} of {failure.total_elements:,} elements")
    if failure.max_abs_error is not None:
        detail.append(f"max abs error {failure.max_abs_error:.3g}")
    if failure.first_bad_index is not None:
        detail.append(f"first at {list(failure.first_bad_index)}")
    tail = f" ({'; '.join(detail)})" if detail else ""
    return f"[red]{failure.check}[/]: {escape(failure.message)}{tail} [{', '.join(where)}]"


def verification_line(report: VerificationReport, oracle: str) -> str:
    if not report.passed:
        return failure_line(report.failures[0])
    sizes = ", ".join(report.problems)
    return (
        f"[green]passed[/]: {report.input_sets} input sets × {len(report.problems)} sizes ({sizes}) "
        f"against the {oracle}; {', '.join(report.checks_run)}"
    )


def timing_line(timing: TimingReport) -> str:
    text = (
        f"{timing.median_ms:.4f} ms median (p10 {timing.p10_ms:.4f}, p90 {timing.p90_ms:.4f}, "
        f"{timing.runs} runs)"
    )
    if timing.bandwidth_gbs is not None:
        text += f" · {timing.bandwidth_gbs:,.0f} GB/s"
    if timing.flop_rate_tflops:
        text += f" · {timing.flop_rate_tflops:.2f} TFLOP/s"
    if timing.roofline_fraction is not None:
        text += f" · {timing.roofline_fraction:.0%} of roofline"
    return text


def baseline_table(baseline: Baseline, gpu: DeviceInfo | None) -> Table:
    target = baseline.target
    table = Table(show_header=False, box=None, pad_edge=False)
    table.add_column(style="bold cyan", no_wrap=True)
    table.add_column()
    line = target.kernel.name_span.start_line + 1
    table.add_row("kernel", f"{target.kernel.name}  [dim]{target.path}:{line}[/]")
    spec_note = target.spec.inference_note if target.spec and target.spec.inferred else "written in the file"
    table.add_row("spec", spec_note)
    table.add_row("compile", compile_line(baseline.compile))
    if baseline.verification is not None:
        table.add_row("verify", verification_line(baseline.verification, baseline.oracle))
    if baseline.timing is not None:
        table.add_row("time", timing_line(baseline.timing) + (f" on {gpu.name}" if gpu else ""))
    for note in baseline.notes:
        table.add_row("note", f"[yellow]{escape(note)}[/]")
    if baseline.error is not None:
        table.add_row("gpu", f"[yellow]{escape(baseline.error.message)}[/]")
    return table


def candidates_table(results: list[CandidateResult] | tuple[CandidateResult, ...]) -> Table:
    table = Table(title="candidates", title_justify="left")
    table.add_column("#", justify="right")
    table.add_column("change")
    table.add_column("status")
    table.add_column("median ms", justify="right")
    table.add_column("speedup", justify="right")
    table.add_column("95% CI of time ratio", justify="right")
    table.add_column("why")
    for i, result in enumerate(results, 1):
        c = result.comparison
        status = Text(
            result.status + (" (cached)" if result.cached else ""), style=STATUS_STYLE.get(result.status, "")
        )
        table.add_row(
            str(i),
            result.candidate.description,
            status,
            f"{c.candidate.median_ms:.4f}" if c else "",
            f"{c.speedup:.2f}×" if c else "",
            f"{c.ratio_ci[0]:.3f}–{c.ratio_ci[1]:.3f}" if c else "",
            Text(result.reason, overflow="fold"),
        )
    return table


def device_table(info: DeviceInfo) -> Table:
    table = Table(show_header=False, box=None)
    table.add_column(style="bold cyan")
    table.add_column()
    cc = f"{info.compute_capability[0]}.{info.compute_capability[1]}"
    table.add_row("GPU", f"{info.index}: {info.name} (compute capability {cc}, {info.multiprocessors} SMs)")
    table.add_row("memory", f"{info.memory_bytes / 2**30:.0f} GiB, L2 {info.l2_bytes / 2**20:.0f} MiB")
    table.add_row(
        "shared/block",
        f"{info.shared_bytes_per_block // 1024} KiB ({info.shared_bytes_per_block_optin // 1024} KiB opt-in)",
    )
    table.add_row("driver / runtime", f"{info.driver_version} / {info.runtime_version}")
    if info.ceilings:
        rates = ", ".join(f"{k} {v:.1f} TFLOP/s" for k, v in info.ceilings.flops_tflops.items())
        table.add_row("measured", f"copy {info.ceilings.copy_bandwidth_gbs:,.0f} GB/s; {rates}")
    return table
