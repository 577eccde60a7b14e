"""What the model reads: the engine's results as compact, plain text a CUDA engineer would want.

Compile diagnostics carry the line in the code the model sent (and the file's line), the source line
itself, and the kernel's registers and spills; a failed verification names the check, the size, the input
set and the first bad element; a timing gives both medians, the speedup with its interval and the
verdict, achieved bandwidth and the fraction of the measured roofline."""

from __future__ import annotations

from cuda_agent.agent.candidates import CandidateResult
from cuda_agent.agent.engine import Baseline
from cuda_agent.sandbox.reports import CheckFailure, CompileResult, DeviceInfo, TimingReport

MAX_DIAGNOSTICS = 8
MAX_FAILURES = 3


def gpu_text(device: DeviceInfo) -> str:
    cc = f"{device.compute_capability[0]}.{device.compute_capability[1]}"
    lines = [
        f"{device.name}: compute capability {cc} ({device.arch}), {device.multiprocessors} SMs, "
        f"{device.memory_bytes / 2**30:.0f} GiB memory, L2 {device.l2_bytes / 2**20:.0f} MiB, "
        f"shared memory {device.shared_bytes_per_block // 1024} KiB per block "
        f"({device.shared_bytes_per_block_optin // 1024} KiB opt-in with cudaFuncSetAttribute, which the "
        "engine does not call: stay within the default)",
    ]
    if device.ceilings is not None:
        rates = ", ".join(
            f"{dtype} {rate:.1f} TFLOP/s" for dtype, rate in device.ceilings.flops_tflops.items()
        )
        lines.append(
            f"measured ceilings: copy bandwidth {device.ceilings.copy_bandwidth_gbs:,.0f} GB/s; {rates}"
        )
    return "\n".join(lines)


def timing_text(timing: TimingReport) -> str:
    text = (
        f"{timing.median_ms:.4f} ms median (p10 {timing.p10_ms:.4f}, p90 {timing.p90_ms:.4f}, "
        f"{timing.runs} runs)"
    )
    if timing.bandwidth_gbs is not None:
        text += f", {timing.bandwidth_gbs:,.0f} GB/s"
    if timing.flop_rate_tflops:
        text += f", {timing.flop_rate_tflops:.2f} TFLOP/s"
    if timing.roofline_fraction is not None:
        text += f", {timing.roofline_fraction:.0%} of the measured roofline"
    if timing.floor_ms is not None:
        text += f" (the ceilings allow {timing.floor_ms:.4f} ms)"
    return text


def resources_text(compiled: CompileResult) -> str:
    if compiled.kernel is None:
        return ""
    res = compiled.kernel.resources
    parts = [f"{compiled.kernel.backend} {compiled.kernel.arch}"]
    if res.registers is not None:
        parts.append(f"{res.registers} registers/thread")
    if res.shared_bytes is not None:
        parts.append(f"{res.shared_bytes} B static shared")
    if res.stack_bytes:
        parts.append(f"{res.stack_bytes} B stack")
    if (spills := res.spilled_bytes) is not None:
        parts.append(f"{spills} B spilled" if spills else "no spills")
    return ", ".join(parts)


def baseline_text(baseline: Baseline) -> str:
    problems = "; ".join(
        f"{p.label} ({p.bytes_moved:,} bytes moved" + (f", {p.flops:,} flops" if p.flops else "") + ")"
        for p in baseline.problems
    )
    lines = [
        f"compiled: {resources_text(baseline.compile)}",
        f"verified against the {baseline.oracle} at: {problems} (the first is the benchmark size)",
    ]
    if baseline.timing is not None:
        lines.append(f"time at the benchmark size: {timing_text(baseline.timing)}")
    lines += [f"note: {note}" for note in baseline.notes]
    return "\n".join(lines)


def compile_text(compiled: CompileResult, source: str, first_line: int, path: str) -> str:
    """Diagnostics with lines in the model's code: `first_line` is the file line (1-based) where the
    submitted code starts in `source`."""
    lines_of = source.splitlines()
    head = f"compile {'ok' if compiled.ok else 'FAILED'} ({compiled.backend or 'no compiler'})"
    if compiled.ok and compiled.kernel is not None:
        head += f": {resources_text(compiled)}"
    out = [head]
    shown = [d for d in compiled.diagnostics if d.severity in ("error", "warning")][:MAX_DIAGNOSTICS]
    for d in shown:
        in_file = d.file is None or d.file == path or d.file.endswith(path.rsplit("/", 1)[-1])
        if d.line is not None and in_file:
            ours = d.line - first_line + 1
            where = f"line {ours} of your code" if ours >= 1 else f"file line {d.line} (outside your code)"
            column = f", column {d.column}" if d.column else ""
            out.append(f"{where}{column}: {d.severity}: {d.message}")
            if 1 <= d.line <= len(lines_of):
                out.append(f"    | {lines_of[d.line - 1].strip()}")
        else:
            out.append(f"{d.severity}: {d.message}" + (f" ({d.file}:{d.line})" if d.file else ""))
    hidden = len([d for d in compiled.diagnostics if d.severity in ("error", "warning")]) - len(shown)
    if hidden > 0:
        out.append(f"... and {hidden} more")
    if not compiled.ok and not compiled.diagnostics and compiled.log:
        out.append(compiled.log.strip()[-1500:])
    return "\n".join(out)


def failure_text(failure: CheckFailure) -> str:
    where = [f"at {failure.problem}"] if failure.problem else []
    if failure.seed is not None:
        where.append(f"input set seed {failure.seed}")
    detail = f"{failure.check}: {failure.message}"
    if failure.first_bad_index is not None and "first at" not in failure.message:
        detail += f"; first bad index {list(failure.first_bad_index)}"
    if failure.expected is not None and failure.actual is not None and "expected" not in failure.message:
        detail += f" (expected {failure.expected!r}, got {failure.actual!r})"
    return detail + (f" [{', '.join(where)}]" if where else "")


def result_text(result: CandidateResult, first_line: int, path: str, best_speedup: float | None) -> str:
    """Everything the engine found about one candidate, for the model."""
    out = [compile_text(result.compile, result.candidate.source, first_line, path)]
    if not result.compile.ok:
        out.append("result: compile error; nothing was run")
        return "\n".join(out)
    if result.error is not None:
        out.append(f"result: {result.error.kind.replace('_', ' ')}: {result.error.message}")
        return "\n".join(out)
    report = result.verification
    if report is not None and not report.passed:
        out.append(f"verification FAILED ({len(report.failures)} check(s)):")
        out += [f"  {failure_text(f)}" for f in report.failures[:MAX_FAILURES]]
        out.append("result: rejected (wrong results are never timed)")
        return "\n".join(out)
    if report is not None:
        out.append(
            f"verified: {report.input_sets} input sets x {len(report.problems)} sizes "
            f"({', '.join(report.problems)}); checks {', '.join(report.checks_run)}"
        )
    c = result.comparison
    if c is None:
        out.append(f"result: {result.status}")
        return "\n".join(out)
    if c.timed_output_failures:
        out.append(
            "the outputs of timed runs were wrong (the kernel changed behaviour after its first runs):"
        )
        out += [f"  {failure_text(f)}" for f in c.timed_output_failures[:MAX_FAILURES]]
    out.append(f"original:  {timing_text(c.baseline)}")
    out.append(f"candidate: {timing_text(c.candidate)}")
    out.append(
        f"speedup {c.speedup:.3f}x; 95% interval of the candidate/original time ratio "
        f"[{c.ratio_ci[0]:.3f}, {c.ratio_ci[1]:.3f}]; {c.decision}"
    )
    verdict = result.status
    if result.faster and (best_speedup is None or (result.speedup or 0.0) > best_speedup):
        verdict += " (new best)"
    out.append(f"result: {verdict}")
    return "\n".join(out)
