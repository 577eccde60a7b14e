"""Turning a chosen launch configuration or kernel body into the user's file, and showing it as a diff."""

from __future__ import annotations

import difflib
import json
from dataclasses import replace

from cuda_agent.agent.device_source import replace_span
from cuda_agent.agent.kernels import Span
from cuda_agent.agent.launch_sites import SitesWritten, write_launch_sites
from cuda_agent.agent.spec import KernelSpec, LaunchSpec, render_spec
from cuda_agent.agent.spec.elsewhere import Neighbours
from cuda_agent.agent.targets import KernelTarget, load_targets


def _block_text(block: tuple[int, ...]) -> str:
    return "[" + ", ".join(str(b) for b in block) + "]"


def _empty_span_at_end(span: Span) -> Span:
    return replace(span, start_byte=span.end_byte, start_line=span.end_line, start_column=span.end_column)


def _empty_span_at(span: Span) -> Span:
    return replace(span, end_byte=span.start_byte, end_line=span.start_line, end_column=span.start_column)


def unified_diff(old: str, new: str, path: str) -> str:
    return "".join(
        difflib.unified_diff(
            old.splitlines(keepends=True), new.splitlines(keepends=True), f"a/{path}", f"b/{path}", n=2
        )
    )


def with_launch(target: KernelTarget, launch: LaunchSpec, source: str | None = None) -> str:
    return write_launch(target, launch, source).text


def write_launch(target: KernelTarget, launch: LaunchSpec, source: str | None = None) -> SitesWritten:
    """The file with the kernel's whole launch (block, grid, dynamic shared memory) written where the
    user will look for it: the spec's values, or, for an inferred spec, the spec written out above the
    kernel; and the host code's launches of the kernel (agent/launch_sites.py), with a note for each
    launch left as it was. `source` is the file with the kernel already rewritten (the spec comment sits
    above the kernel, so its positions are the same there); default: the target's own text. A rewrite
    that changes how many threads cover the data uses this, so re-reading the file gives the launch it
    was verified with, and the program runs it that way."""
    assert target.spec is not None
    text = target.source if source is None else source
    spec = replace(target.spec, launch=launch)
    if launch == target.spec.launch:
        return SitesWritten(text, ())
    edits: list[tuple[Span, str]] = []
    if target.spec.inferred:
        edits.append((_empty_span_at(target.kernel.span), render_spec(spec) + "\n"))
    else:
        edits += _spec_edits(target.spec, launch)
    written = write_launch_sites(_applied(text, edits), target.spec, target.kernel.name, launch)
    if written.launches:
        return written
    # Launched nowhere in its own file (a header's kernel): its launches are in files this edit does not
    # touch. Only then is the folder looked at (each launch-config candidate comes through here).
    elsewhere = [f.name for f, _ in Neighbours(target.path).launching(target.kernel.name)]
    if elsewhere:  # a header's kernel: its launches are in files this edit does not touch
        block = " × ".join(map(str, launch.block))
        note = f"{', '.join(elsewhere)} also launch it, unchanged: launch it there with block {block}"
        written = replace(written, notes=(*written.notes, note))
    return written


def with_inferred_spec_kept(target: KernelTarget, source: str, launch: LaunchSpec) -> str:
    """`source` (the kernel rewritten) with the target's inferred spec written out above the kernel when
    the rewritten file no longer infers one (a block macro turned into blockDim, a loop the inference does
    not follow): applied, the file must still say what the kernel computes and how it is launched."""
    assert target.spec is not None
    if not target.spec.inferred:
        return source
    again = load_targets(target.path, source).find(target.kernel.name)
    if again is None or again.spec is not None:
        return source
    spec = render_spec(replace(target.spec, launch=launch))
    return replace_span(source, _empty_span_at(again.kernel.span), spec + "\n")


def _spec_edits(old_spec: KernelSpec, launch: LaunchSpec) -> list[tuple[Span, str]]:
    """The written spec's launch values changed to `launch`'s."""
    edits = []
    old = old_spec.launch
    spans = old_spec.value_spans
    if old_spec.block_span is not None and launch.block != old.block:
        edits.append((old_spec.block_span, _block_text(launch.block)))
    grid_span = spans.get(("launch", "grid"))
    if grid_span is not None and launch.grid != old.grid:
        edits.append((grid_span, "[" + ", ".join(json.dumps(g) for g in launch.grid) + "]"))
    if launch.shared_bytes != old.shared_bytes:
        shared_span = spans.get(("launch", "shared_bytes"))
        value = json.dumps(str(launch.shared_bytes))
        if shared_span is not None:
            edits.append((shared_span, value))
        elif grid_span is not None:  # not written before: a new line under the grid
            edits.append((_empty_span_at_end(grid_span), f"\nshared_bytes = {value}"))
    return edits


def _applied(text: str, edits: list[tuple[Span, str]]) -> str:
    # From the end of the file backwards, so earlier byte offsets stay valid.
    for span, new_text in sorted(edits, key=lambda e: e[0].start_byte, reverse=True):
        text = replace_span(text, span, new_text)
    return text


def with_spec_flags(target: KernelTarget, flags: tuple[str, ...]) -> str:
    """The file with `flags` in the kernel's spec (a written spec's `flags` key, or the inferred spec
    written out above the kernel), so the file re-read compiles the kernel the way it was measured."""
    spec = target.spec
    assert spec is not None
    merged = tuple(dict.fromkeys((*spec.flags, *flags)))
    if spec.inferred:
        comment = render_spec(replace(spec, flags=merged)) + "\n"
        return _applied(target.source, [(_empty_span_at(target.kernel.span), comment)])
    value = "[" + ", ".join(json.dumps(flag) for flag in merged) + "]"
    span = spec.value_spans.get(("flags",))
    if span is not None:
        return _applied(target.source, [(span, value)])
    assert spec.span is not None, "a written spec knows where it is"
    data = target.source.encode("utf-8")
    first_line_end = data.index(b"\n", spec.span.start_byte) + 1  # after `/* cuda-agent`
    return (data[:first_line_end] + f"flags = {value}\n".encode() + data[first_line_end:]).decode("utf-8")
