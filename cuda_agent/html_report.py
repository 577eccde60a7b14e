"""One self-contained HTML page of a run (`cuda-agent optimize … --report`, `cuda-agent bench`): per kernel
the speedup, its roofline position before and after as a chart, every candidate with its status and time,
the diff of the best, the verification it passed and the GPU.

No script, no stylesheet or font from elsewhere: the charts are inline SVG, so the page opens the same
from a file, an e-mail or a CI artifact, with no network.
"""

from __future__ import annotations

import html
import math
from collections.abc import Sequence
from dataclasses import dataclass, field

from cuda_agent.agent.candidates import CandidateResult
from cuda_agent.agent.optimize import OptimizeOutcome
from cuda_agent.sandbox.reports import DeviceInfo, TimingReport

BEFORE, AFTER, ROOF = "#cf222e", "#1a7f37", "#57606a"  # the marks' colours (a test looks for them)


@dataclass(frozen=True)
class Point:
    """A kernel's place on the roofline: achieved GB/s and, with FLOPs counted, GFLOP/s at its intensity."""

    gbs: float | None
    gflops: float | None = None
    intensity: float | None = None  # FLOP per byte of compulsory traffic
    fraction: float | None = None  # of the binding ceiling


@dataclass(frozen=True)
class CandidateRow:
    description: str
    proposer: str
    status: str
    median_ms: float | None
    speedup: float | None
    why: str


@dataclass(frozen=True)
class KernelEntry:
    name: str
    where: str  # file:line, or the bench file and its size
    status: str  # faster, no gain, failed, no spec
    original_ms: float | None = None
    best_ms: float | None = None
    speedup: float | None = None
    change: str = ""
    explanation: str = ""
    before: Point | None = None
    after: Point | None = None
    candidates: tuple[CandidateRow, ...] = ()
    diff: str = ""
    verification: str = ""
    torch_eager_ms: float | None = None
    torch_compile_ms: float | None = None
    cached: bool = False
    peak_tflops: float | None = None  # the ceiling of the kernel's FLOP dtype (else the page's)


@dataclass(frozen=True)
class Page:
    title: str
    gpu: str
    copy_gbs: float | None  # the measured ceilings the charts are drawn against
    peak_tflops: float | None
    facts: tuple[str, ...]  # lines under the title: when, where it ran, the budget
    summary: tuple[str, ...]
    kernels: tuple[KernelEntry, ...] = field(default_factory=tuple)


# -- from the engine's results -------------------------------------------------------------------------


def point(timing: TimingReport | None, flops: int, bytes_moved: int) -> Point | None:
    if timing is None or timing.median_ms <= 0:
        return None
    seconds = timing.median_ms * 1e-3
    gflops = flops / seconds / 1e9 if flops else None
    intensity = flops / bytes_moved if flops and bytes_moved else None
    return Point(timing.bandwidth_gbs, gflops, intensity, timing.roofline_fraction)


def candidate_row(result: CandidateResult) -> CandidateRow:
    c = result.comparison
    return CandidateRow(
        result.candidate.description, result.candidate.proposer,
        result.status + (" (cached)" if result.cached else ""),
        c.candidate.median_ms if c else None, c.speedup if c else None, result.reason,
    )  # fmt: skip


def entry(
    name: str, where: str, status: str, outcome: OptimizeOutcome, diff: str, cached: bool,
    device: DeviceInfo | None,
) -> KernelEntry:  # fmt: skip
    baseline = outcome.baseline
    problem = baseline.problems[0] if baseline.problems else None
    flops, moved = (problem.flops, problem.bytes_moved) if problem else (0, 0)
    best = outcome.best
    comparison = best.comparison if best is not None else None
    verification = ""
    if baseline.verification is not None and baseline.verification.passed:
        v = best.verification if best is not None and best.verification is not None else baseline.verification
        verification = (
            f"passed: {v.input_sets} input sets × {len(v.problems)} sizes ({', '.join(v.problems)}) "
            f"against the {baseline.oracle}; checks: {', '.join(v.checks_run)}"
        )
    elif baseline.verification is not None:
        verification = f"the original failed its own checks: {baseline.verification.reason}"
    return KernelEntry(
        name=name, where=where, status=status,
        original_ms=(comparison.baseline.median_ms if comparison else baseline.timing.median_ms
                     if baseline.timing else None),
        best_ms=comparison.candidate.median_ms if comparison else None,
        speedup=comparison.speedup if comparison else None,
        change=best.candidate.description if best is not None else "",
        explanation=outcome.explanation,
        before=point(comparison.baseline if comparison else baseline.timing, flops, moved),
        after=point(comparison.candidate, flops, moved) if comparison else None,
        candidates=tuple(candidate_row(r) for r in outcome.results),
        diff=diff, verification=verification, cached=cached,
        peak_tflops=ceilings_of(device, problem.flop_dtype if problem else "float32")[1],
    )  # fmt: skip


def ceilings_of(device: DeviceInfo | None, dtype: str = "float32") -> tuple[float | None, float | None]:
    if device is None or device.ceilings is None:
        return None, None
    return device.ceilings.copy_bandwidth_gbs, device.ceilings.flops_tflops.get(dtype)


# -- the page ------------------------------------------------------------------------------------------

STYLE = """
body { font: 14px/1.45 system-ui, -apple-system, "Segoe UI", sans-serif; margin: 24px auto; max-width: 1180px;
       color: #1f2328; padding: 0 16px; }
h1 { font-size: 22px; margin-bottom: 4px; } h2 { font-size: 17px; margin: 28px 0 6px; }
.facts { color: #57606a; margin: 0 0 12px; } .facts p, .summary p { margin: 2px 0; }
table { border-collapse: collapse; width: 100%; margin: 8px 0; font-size: 13px; }
th, td { border-bottom: 1px solid #d0d7de; padding: 4px 8px; text-align: left; vertical-align: top; }
td.num, th.num { text-align: right; font-variant-numeric: tabular-nums; white-space: nowrap; }
.faster { color: #1a7f37; font-weight: 600; } .failed, .rejected, .compile-error { color: #cf222e; }
.no-gain, .slower { color: #9a6700; } .no-spec { color: #57606a; }
section.kernel { border-top: 2px solid #d0d7de; margin-top: 24px; }
.grid { display: grid; grid-template-columns: 360px 1fr; gap: 16px; align-items: start; }
pre.diff { background: #f6f8fa; padding: 8px; overflow-x: auto; font-size: 12px; line-height: 1.35; }
pre.diff .add { color: #1a7f37; } pre.diff .del { color: #cf222e; } pre.diff .hunk { color: #8250df; }
details summary { cursor: pointer; color: #0969da; }
"""


def render(page: Page) -> str:
    e = html.escape
    kernels = "\n".join(_kernel_section(k, page, i) for i, k in enumerate(page.kernels))
    return f"""<!DOCTYPE html>
<html lang="en"><head><meta charset="utf-8"><title>{e(page.title)}</title>
<meta name="viewport" content="width=device-width, initial-scale=1"><style>{STYLE}</style></head>
<body>
<h1>{e(page.title)}</h1>
<div class="facts">{"".join(f"<p>{e(f)}</p>" for f in (f"GPU: {page.gpu}", *page.facts))}</div>
<div class="summary">{"".join(f"<p>{e(s)}</p>" for s in page.summary)}</div>
{_overview(page)}
{kernels}
</body></html>
"""


def _ms(value: float | None) -> str:
    return f"{value:.3f} ms" if value is not None else ""


def _times(value: float | None) -> str:
    return f"{value:.2f}×" if value is not None else ""


def _css(status: str) -> str:
    return status.split(" (")[0].replace(" ", "-")


def _overview(page: Page) -> str:
    e = html.escape
    rows = []
    for i, k in enumerate(page.kernels):
        torch = (
            f'<td class="num">{_ms(k.torch_eager_ms)}</td><td class="num">{_ms(k.torch_compile_ms)}</td>'
            if _has_torch(page)
            else ""
        )
        rows.append(
            f'<tr><td><a href="#k{i}">{e(k.name)}</a><br><small>{e(k.where)}</small></td>'
            f'<td class="{_css(k.status)}">{e(k.status)}{" (cached)" if k.cached else ""}</td>'
            f'<td class="num">{_ms(k.original_ms)}</td><td class="num">{_ms(k.best_ms)}</td>'
            f'<td class="num">{_times(k.speedup)}</td>{torch}<td>{e(k.change)}</td></tr>'
        )
    torch_head = (
        '<th class="num">torch eager</th><th class="num">torch.compile</th>' if _has_torch(page) else ""
    )
    return (
        '<table class="overview"><thead><tr><th>kernel</th><th>status</th><th class="num">original</th>'
        f'<th class="num">best</th><th class="num">speedup</th>{torch_head}<th>change</th></tr></thead>'
        f"<tbody>{''.join(rows)}</tbody></table>"
    )


def _has_torch(page: Page) -> bool:
    return any(k.torch_eager_ms is not None or k.torch_compile_ms is not None for k in page.kernels)


def _kernel_section(k: KernelEntry, page: Page, index: int) -> str:
    e = html.escape
    head = f"{e(k.name)} <small>{e(k.where)}</small>"
    figures = [f'<span class="{_css(k.status)}">{e(k.status)}</span>']
    if k.speedup is not None:
        figures.append(f"{k.speedup:.2f}× faster ({_ms(k.original_ms)} → {_ms(k.best_ms)})")
    elif k.original_ms is not None:
        figures.append(f"original {_ms(k.original_ms)}")
    body = [f"<p>{' · '.join(figures)}</p>"]
    if k.explanation:
        body.append(f"<p>{e(k.explanation)}</p>")
    if k.verification:
        body.append(f"<p><b>verification:</b> {e(k.verification)}</p>")
    chart = roofline_svg(k.before, k.after, page.copy_gbs, k.peak_tflops or page.peak_tflops)
    body.append(f'<div class="grid"><div>{chart}</div><div>{_candidates(k.candidates)}</div></div>')
    if k.diff:
        body.append(f"<details open><summary>the best rewrite's diff</summary>{_diff(k.diff)}</details>")
    return f'<section class="kernel" id="k{index}"><h2>{head}</h2>{"".join(body)}</section>'


def _candidates(rows: Sequence[CandidateRow]) -> str:
    if not rows:
        return ""
    e = html.escape
    body = "".join(
        f"<tr><td>{i}</td><td>{e(r.description)}<br><small>{e(r.proposer)}</small></td>"
        f'<td class="{_css(r.status)}">{e(r.status)}</td><td class="num">{_ms(r.median_ms)}</td>'
        f'<td class="num">{_times(r.speedup)}</td><td>{e(r.why)}</td></tr>'
        for i, r in enumerate(rows, 1)
    )
    return (
        '<table class="candidates"><thead><tr><th>#</th><th>candidate</th><th>status</th>'
        '<th class="num">median</th><th class="num">speedup</th><th>why</th></tr></thead>'
        f"<tbody>{body}</tbody></table>"
    )


def _diff(diff: str) -> str:
    lines = []
    for line in diff.splitlines():
        kind = (
            "hunk" if line.startswith("@@")
            else "add" if line.startswith("+") and not line.startswith("+++")
            else "del" if line.startswith("-") and not line.startswith("---")
            else ""
        )  # fmt: skip
        text = html.escape(line)
        lines.append(f'<span class="{kind}">{text}</span>' if kind else text)
    return '<pre class="diff">' + "\n".join(lines) + "</pre>"


# -- the chart -----------------------------------------------------------------------------------------

W, H, PAD = 340, 240, 40


def roofline_svg(
    before: Point | None, after: Point | None, copy_gbs: float | None, peak_tflops: float | None
) -> str:
    """A log-log roofline (GFLOP/s against FLOP per byte) when the kernel's FLOPs are counted; else the
    memory roofline alone: achieved GB/s before and after against the copy ceiling."""
    points = [p for p in (before, after) if p is not None]
    if not points:
        return '<p class="no-spec">not timed: no chart</p>'
    if all(p.gflops and p.intensity for p in points) and copy_gbs and peak_tflops:
        return _log_roofline(before, after, copy_gbs, peak_tflops * 1e3)
    return _bandwidth_bars(before, after, copy_gbs)


def _log_roofline(before: Point | None, after: Point | None, copy_gbs: float, peak_gflops: float) -> str:
    ridge = peak_gflops / copy_gbs
    intensities = [p.intensity for p in (before, after) if p is not None and p.intensity]
    x_lo = math.log10(min([*intensities, ridge]) / 8)
    x_hi = math.log10(max([*intensities, ridge]) * 8)
    rates = [p.gflops for p in (before, after) if p is not None and p.gflops]
    y_lo = math.log10(min([*rates, copy_gbs * 10**x_lo]) / 4)
    y_hi = math.log10(peak_gflops * 3)

    def x(value: float) -> float:
        return PAD + (math.log10(value) - x_lo) / (x_hi - x_lo) * (W - PAD - 10)

    def y(value: float) -> float:
        return H - PAD - (math.log10(value) - y_lo) / (y_hi - y_lo) * (H - PAD - 10)

    left = 10**x_lo
    roof = (
        f'<polyline fill="none" stroke="{ROOF}" stroke-width="2" '
        f'points="{x(left):.1f},{y(copy_gbs * left):.1f} {x(ridge):.1f},{y(peak_gflops):.1f} '
        f'{x(10**x_hi):.1f},{y(peak_gflops):.1f}"/>'
    )
    marks = [
        _mark(x(p.intensity), y(p.gflops), colour, label, p)  # type: ignore[arg-type]
        for p, colour, label in ((before, BEFORE, "before"), (after, AFTER, "after"))
        if p is not None
    ]
    labels = (
        f'<text x="{W / 2:.0f}" y="{H - 8}" text-anchor="middle" font-size="11">FLOP per byte (log)</text>'
        f'<text x="12" y="{H / 2:.0f}" transform="rotate(-90 12 {H / 2:.0f})" text-anchor="middle" '
        f'font-size="11">GFLOP/s (log)</text>'
        f'<text x="{W - 12}" y="{y(peak_gflops) - 6:.1f}" text-anchor="end" font-size="10" fill="{ROOF}">'
        f"{peak_gflops / 1e3:.1f} TFLOP/s</text>"
        f'<text x="{x(left) + 4:.1f}" y="{y(copy_gbs * left) - 6:.1f}" font-size="10" fill="{ROOF}">'
        f"{copy_gbs:,.0f} GB/s</text>"
    )
    return _svg("roofline", roof + "".join(marks) + labels + _legend())


def _bandwidth_bars(before: Point | None, after: Point | None, copy_gbs: float | None) -> str:
    """Achieved GB/s against the copy ceiling; where only the fraction of the roofline is known (a bench
    run written before GB/s were kept), that fraction against 100%."""
    points = [p for p in (before, after) if p is not None]
    by_gbs = all(p.gbs is not None for p in points)
    if not by_gbs and not all(p.fraction is not None for p in points):
        return '<p class="no-spec">no bytes counted for this problem: no chart</p>'
    values = [(p.gbs if by_gbs else p.fraction) or 0.0 for p in points]
    ceiling_value = (copy_gbs or 0.0) if by_gbs else 1.0
    top = max([*values, ceiling_value]) * 1.1
    bars = []
    for row, (p, colour, label) in enumerate(((before, BEFORE, "before"), (after, AFTER, "after"))):
        if p is None:
            continue
        value = (p.gbs if by_gbs else p.fraction) or 0.0
        width = value / top * (W - PAD - 60)
        top_y = 40 + row * 70
        share = f"{p.fraction:.0%} of roofline" if p.fraction is not None else ""
        text = f"{p.gbs:,.0f} GB/s" + (f" · {share}" if share else "") if by_gbs else share
        bars.append(
            f'<rect class="mark" x="{PAD}" y="{top_y}" width="{max(width, 2):.1f}" height="34" '
            f'fill="{colour}"><title>{label}: {text}</title></rect>'
            f'<text x="{PAD}" y="{top_y - 4}" font-size="11">{label}: {text}</text>'
        )
    ceiling = ""
    if ceiling_value:
        cx = PAD + ceiling_value / top * (W - PAD - 60)
        name = f"copy ceiling {copy_gbs:,.0f} GB/s" if by_gbs else "roofline"
        ceiling = (
            f'<line x1="{cx:.1f}" y1="24" x2="{cx:.1f}" y2="{H - PAD}" stroke="{ROOF}" stroke-width="2" '
            f'stroke-dasharray="4 3"/><text x="{cx:.1f}" y="18" text-anchor="middle" font-size="10" '
            f'fill="{ROOF}">{name}</text>'
        )
    caption = f'<text x="{W / 2:.0f}" y="{H - 8}" text-anchor="middle" font-size="11">memory roofline</text>'
    return _svg("bandwidth", "".join(bars) + ceiling + caption)


def _mark(cx: float, cy: float, colour: str, label: str, p: Point) -> str:
    share = f", {p.fraction:.0%} of roofline" if p.fraction is not None else ""
    return (
        f'<circle class="mark" cx="{cx:.1f}" cy="{cy:.1f}" r="7" fill="{colour}">'
        f"<title>{label}: {p.gflops:,.1f} GFLOP/s at {p.intensity:.2f} FLOP/B{share}</title></circle>"
    )


def _legend() -> str:
    return (
        f'<circle cx="{PAD + 8}" cy="16" r="5" fill="{BEFORE}"/><text x="{PAD + 16}" y="20" font-size="11">'
        f'before</text><circle cx="{PAD + 70}" cy="16" r="5" fill="{AFTER}"/><text x="{PAD + 78}" y="20" '
        'font-size="11">after</text>'
    )


def _svg(kind: str, content: str) -> str:
    frame = f'<rect x="0.5" y="0.5" width="{W - 1}" height="{H - 1}" fill="white" stroke="#d0d7de"/>'
    return (
        f'<svg class="chart {kind}" xmlns="http://www.w3.org/2000/svg" width="{W}" height="{H}" '
        f'viewBox="0 0 {W} {H}" role="img">{frame}{content}</svg>'
    )
