"""Hover on a kernel's name: a Markdown table of what is known about it, answered from memory."""

from __future__ import annotations

from cuda_agent.agent.targets import KernelTarget
from cuda_agent.server.backend import KernelResources
from cuda_agent.server.documents import Analysis
from cuda_agent.server.positions import span_range, to_byte_column
from cuda_agent.server.rewrites import MeasuredTime, OptimizeResult
from lsprotocol import types

NO_TIMINGS = "_Verified timings appear after an optimization run (needs a GPU)._"


def hover(
    analysis: Analysis,
    position: types.Position,
    resources: dict[str, KernelResources],
    fresh: bool,
    results: dict[str, OptimizeResult] | None = None,
) -> types.Hover | None:
    """`fresh`: the resources come from compiling exactly this text (else they are from the last save).
    `results`: optimization results for exactly this text, by kernel name."""
    line, column = to_byte_column(analysis.lines, position)
    target = next(
        (t for t in analysis.targets.targets if t.kernel.name and t.kernel.name_contains(line, column)),
        None,
    )
    if target is None:
        return None
    return types.Hover(
        contents=types.MarkupContent(
            kind=types.MarkupKind.Markdown,
            value=kernel_markdown(
                target, resources.get(target.kernel.name), fresh, (results or {}).get(target.kernel.name)
            ),
        ),
        range=span_range(analysis.lines, target.kernel.name_span),
    )


def _cell(text: object) -> str:
    """Markdown table cells cannot hold '|' or newlines."""
    return str(text).replace("|", "\\|").replace("\n", " ")


def kernel_markdown(
    target: KernelTarget,
    resources: KernelResources | None,
    fresh: bool,
    result: OptimizeResult | None = None,
) -> str:
    kernel, spec = target.kernel, target.spec
    if spec is None:
        origin = target.note
    elif spec.inferred:
        origin = spec.inference_note
    else:
        origin = "spec written in the file"
    parts = [f"**`{_cell(kernel.qualified_name)}`** · {_cell(origin)}", ""]
    rows = ["| parameter | role | dtype | shape / value |", "|---|---|---|---|"]
    arguments = {a.name: a for a in spec.arguments} if spec else {}
    for parameter in kernel.parameters:
        argument = arguments.get(parameter.name)
        if argument is None:
            rows.append(f"| `{_cell(parameter.text)}` | ? | ? | |")
            continue
        shape = " × ".join(argument.shape) if argument.shape else _cell(argument.value or "")
        rows.append(
            f"| `{_cell(parameter.name)}` | {argument.role} | {argument.dtype} | {_cell(shape) or '—'} |"
        )
    parts += [*rows, ""]
    facts = ["| | |", "|---|---|"]
    if spec is not None:
        launch = spec.launch
        block = ", ".join(str(b) for b in launch.block)
        grid = ", ".join(launch.grid)
        facts.append(f"| launch | block ({_cell(block)}) · grid ({_cell(grid)}) |")
        if launch.shared_bytes not in ("0", ""):
            facts.append(f"| dynamic shared | {_cell(launch.shared_bytes)} B |")
        sizes = ", ".join(f"{name} = {value:,}" for name, value in spec.sizes.items())
        facts.append(f"| sizes | {_cell(sizes) or '—'} |")
    if kernel.launch_bounds:
        facts.append(f"| launch bounds | `{_cell(kernel.launch_bounds)}` |")
    if resources is not None:
        when = "" if fresh else " (at last save)"
        facts.append(
            f"| compile{when} | {_count(resources.registers, 'registers')} · "
            f"{_count(resources.shared_bytes, 'B shared')} · {_count(resources.spill_bytes, 'B spilled')} "
            f"({resources.backend}, {resources.arch}) |"
        )
    else:
        facts.append("| compile | not compiled yet: saving compiles the file |")
    parts += [*facts, ""]
    parts += timing_rows(result) if result is not None else [NO_TIMINGS]
    return "\n".join(parts)


def _timing_row(label: str, time: MeasuredTime, speedup: str) -> str:
    bandwidth = f"{time.bandwidth_gbs:,.0f} GB/s" if time.bandwidth_gbs else "—"
    roofline = f"{time.roofline_fraction:.0%}" if time.roofline_fraction is not None else "—"
    return (
        f"| {_cell(label)} | {time.median_ms:.4f} ms | {time.p10_ms:.4f}–{time.p90_ms:.4f} ms | {time.runs} "
        f"| {speedup} | {bandwidth} | {roofline} |"
    )


def timing_rows(result: OptimizeResult) -> list[str]:
    """Original against the best candidate, measured on the GPU; then what each candidate tried."""
    searching = " · _the best so far: the search goes on_" if result.searching else ""
    rows = [
        f"**Measured on {_cell(result.gpu)}** ({result.input_sets} input sets, {result.sizes} sizes, "
        f"{_cell(result.measured_at)}){searching}",
        "",
        "| | median | p10–p90 | runs | speedup | bandwidth | of roofline |",
        "|---|---|---|---|---|---|---|",
    ]
    rewrite = result.rewrite
    original = rewrite.original if rewrite else result.original
    if original is not None:
        rows.append(_timing_row("original", original, "1.00×"))
    if rewrite is not None:
        rows.append(_timing_row(f"best: {rewrite.description}", rewrite.best, f"{rewrite.speedup:.2f}×"))
    for label, timed in (("PyTorch eager (the spec's oracle)", result.torch_eager),
                         ("torch.compile (the spec's oracle)", result.torch_compile)):  # fmt: skip
        if timed is not None and original is not None:
            rows.append(_timing_row(label, timed, f"{original.median_ms / timed.median_ms:.2f}×"))
    rows += ["", _cell(rewrite.decision if rewrite else result.explanation), ""]
    if rewrite is not None and rewrite.sanitizer:
        rows += [_cell(rewrite.sanitizer), ""]
    for note in rewrite.notes if rewrite is not None else ():
        rows += [f"Note: {_cell(note)}", ""]  # what the file alone does not carry
    if rewrite is not None and result.torch_compile is not None:
        ratio = result.torch_compile.median_ms / rewrite.best.median_ms
        verdict = "faster than" if ratio >= 1 else "slower than"
        rows += [f"The rewrite is {ratio:.2f}× {verdict} torch.compile of the same function.", ""]
    rows += ["| candidate | proposer | result |", "|---|---|---|"]
    for c in result.candidates:
        speedup = f" {c.speedup:.2f}×" if c.speedup else ""
        rows.append(f"| {_cell(c.description)} | {_cell(c.proposer)} | {_cell(c.status)}{speedup} |")
    return rows


def _count(value: int | None, unit: str) -> str:
    return f"{value} {unit}" if value is not None else f"? {unit}"
