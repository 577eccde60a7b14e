"""Hover on a kernel's name: what is known about it, answered from memory.

Built once as paragraphs and tables, then written in the client's format (`hover.contentFormat`):
Markdown tables for clients that render Markdown, aligned columns without markup for those that show
plain text (Emacs without markdown-mode, Vim's ALE), where table syntax would show as raw pipes.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Literal

from cuda_agent.agent.targets import KernelTarget
from cuda_agent.server.backend import KernelResources
from cuda_agent.server.documents import Analysis
from cuda_agent.server.positions import span_range, to_byte_column
from cuda_agent.server.rewrites import MeasuredTime, OptimizeResult
from lsprotocol import types


@dataclass(frozen=True)
class Styled:
    """Text with a style that only Markdown shows (plain text gives the text alone)."""

    text: str
    style: Literal["code", "strong", "strong code", "emphasis"]


Span = str | Styled
Paragraph = tuple[Span, ...]


@dataclass(frozen=True)
class Table:
    header: tuple[str, ...] | None  # None: rows of label and value, no header
    rows: tuple[tuple[Span, ...], ...]


Block = Paragraph | Table

NO_TIMINGS: Paragraph = (
    Styled("Verified timings appear after an optimization run (needs a GPU).", "emphasis"),
)


def hover(
    analysis: Analysis,
    position: types.Position,
    resources: dict[str, KernelResources],
    fresh: bool,
    results: dict[str, OptimizeResult] | None = None,
    markdown: bool = True,
) -> types.Hover | None:
    """`fresh`: the resources come from compiling exactly this text (else they are from the last save).
    `results`: optimization results for exactly this text, by kernel name. `markdown`: the client's
    format, else plain text."""
    line, column = to_byte_column(analysis.lines, position)
    target = analysis.name_at(line, column)
    if target is None:
        return None
    blocks = kernel_blocks(
        target, resources.get(target.kernel.name), fresh, (results or {}).get(target.kernel.name)
    )
    kind = types.MarkupKind.Markdown if markdown else types.MarkupKind.PlainText
    text = "\n".join(markdown_lines(blocks) if markdown else plain_lines(blocks))
    return types.Hover(
        contents=types.MarkupContent(kind=kind, value=text),
        range=span_range(analysis.lines, target.kernel.name_span),
    )


def kernel_blocks(
    target: KernelTarget,
    resources: KernelResources | None,
    fresh: bool,
    result: OptimizeResult | None = None,
) -> list[Block]:
    kernel, spec = target.kernel, target.spec
    if spec is None:
        origin = target.note
    elif spec.inferred:
        origin = spec.inference_note
    else:
        origin = "spec written in the file"
    title: Paragraph = (Styled(kernel.qualified_name, "strong code"), f" · {origin}")
    parameters: list[tuple[Span, ...]] = []
    arguments = {a.name: a for a in spec.arguments} if spec else {}
    for parameter in kernel.parameters:
        argument = arguments.get(parameter.name)
        if argument is None:
            parameters.append((Styled(parameter.text, "code"), "?", "?", ""))
            continue
        shape = " × ".join(argument.shape) if argument.shape else str(argument.value or "")
        row = (Styled(parameter.name, "code"), str(argument.role), str(argument.dtype), shape or "—")
        parameters.append(row)
    facts: list[tuple[Span, ...]] = []
    if spec is not None:
        launch = spec.launch
        block = ", ".join(str(b) for b in launch.block)
        facts.append(("launch", f"block ({block}) · grid ({', '.join(launch.grid)})"))
        if launch.shared_bytes not in ("0", ""):
            facts.append(("dynamic shared", f"{launch.shared_bytes} B"))
        sizes = ", ".join(f"{name} = {value:,}" for name, value in spec.sizes.items())
        facts.append(("sizes", sizes or "—"))
    if kernel.launch_bounds:
        facts.append(("launch bounds", Styled(kernel.launch_bounds, "code")))
    if resources is not None:
        when = "" if fresh else " (at last save)"
        counts = (
            f"{_count(resources.registers, 'registers')} · {_count(resources.shared_bytes, 'B shared')} · "
            f"{_count(resources.spill_bytes, 'B spilled')}"
        )
        facts.append((f"compile{when}", f"{counts} ({resources.backend}, {resources.arch})"))
    else:
        facts.append(("compile", "not compiled yet: saving compiles the file"))
    blocks: list[Block] = [
        title,
        Table(("parameter", "role", "dtype", "shape / value"), tuple(parameters)),
        Table(None, tuple(facts)),
    ]
    return blocks + (timing_blocks(result) if result is not None else [NO_TIMINGS])


def _timing_row(label: str, time: MeasuredTime, speedup: str) -> tuple[Span, ...]:
    bandwidth = f"{time.bandwidth_gbs:,.0f} GB/s" if time.bandwidth_gbs else "—"
    roofline = f"{time.roofline_fraction:.0%}" if time.roofline_fraction is not None else "—"
    spread = f"{time.p10_ms:.4f}–{time.p90_ms:.4f} ms"
    return (label, f"{time.median_ms:.4f} ms", spread, str(time.runs), speedup, bandwidth, roofline)


def timing_blocks(result: OptimizeResult) -> list[Block]:
    """Original against the best candidate, measured on the GPU; then what each candidate tried."""
    measured: Paragraph = (
        Styled(f"Measured on {result.gpu}", "strong"),
        f" ({result.input_sets} input sets, {result.sizes} sizes, {result.measured_at})",
    )
    if result.searching:
        measured += (" · ", Styled("the best so far: the search goes on", "emphasis"))
    rows: list[tuple[Span, ...]] = []
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
    header = ("", "median", "p10–p90", "runs", "speedup", "bandwidth", "of roofline")
    blocks: list[Block] = [measured, Table(header, tuple(rows))]
    decision = rewrite.decision if rewrite else result.explanation
    if decision:
        blocks.append((decision,))
    if rewrite is not None and rewrite.sanitizer:
        blocks.append((rewrite.sanitizer,))
    for note in rewrite.notes if rewrite is not None else ():
        blocks.append((f"Note: {note}",))  # what the file alone does not carry
    if rewrite is not None and result.torch_compile is not None:
        ratio = result.torch_compile.median_ms / rewrite.best.median_ms
        verdict = "faster than" if ratio >= 1 else "slower than"
        blocks.append((f"The rewrite is {ratio:.2f}× {verdict} torch.compile of the same function.",))
    candidates = tuple(
        (c.description, c.proposer, f"{c.status} {c.speedup:.2f}×" if c.speedup else c.status)
        for c in result.candidates
    )
    blocks.append(Table(("candidate", "proposer", "result"), candidates))
    return blocks


def timing_rows(result: OptimizeResult) -> list[str]:
    """The timing part of the hover, as Markdown lines."""
    return markdown_lines(timing_blocks(result))


def _count(value: int | None, unit: str) -> str:
    return f"{value} {unit}" if value is not None else f"? {unit}"


# -- Markdown ------------------------------------------------------------------------------------------


def _escaped(text: str) -> str:
    """Markdown table cells cannot hold '|' or newlines; neither can a one-line paragraph hold newlines."""
    return text.replace("|", "\\|").replace("\n", " ")


def _markdown_span(span: Span) -> str:
    if isinstance(span, str):
        return _escaped(span)
    text = _escaped(span.text)
    return {
        "code": f"`{text}`",
        "strong": f"**{text}**",
        "strong code": f"**`{text}`**",
        "emphasis": f"_{text}_",
    }[span.style]


def markdown_lines(blocks: list[Block]) -> list[str]:
    """Blocks apart by an empty line; tables with a header row (an empty one for label-value tables)."""
    lines: list[str] = []
    for block in blocks:
        if lines:
            lines.append("")
        if isinstance(block, Table):
            width = len(block.header) if block.header else len(block.rows[0]) if block.rows else 2
            header = block.header or ("",) * width
            lines.append("| " + " | ".join(map(_escaped, header)) + " |")
            lines.append("|" + "---|" * width)
            lines += ["| " + " | ".join(map(_markdown_span, row)) + " |" for row in block.rows]
        else:
            lines.append("".join(map(_markdown_span, block)))
    return lines


# -- Plain text ----------------------------------------------------------------------------------------


def _plain(span: Span) -> str:
    return (span if isinstance(span, str) else span.text).replace("\n", " ")


def plain_lines(blocks: list[Block]) -> list[str]:
    """Tables as columns padded to their widest cell, two spaces apart; blocks apart by an empty line."""
    lines: list[str] = []
    for block in blocks:
        if lines:
            lines.append("")
        if isinstance(block, Table):
            rows = [block.header] if block.header else []
            rows += [tuple(map(_plain, row)) for row in block.rows]
            widths = [max(len(cell) for cell in column) for column in zip(*rows, strict=True)]
            lines += [
                "  ".join(c.ljust(w) for c, w in zip(row, widths, strict=True)).rstrip() for row in rows
            ]
        else:
            lines.append("".join(map(_plain, block)))
    return lines
