"""Turning a chosen launch configuration or kernel body into the user's file, and showing it as a diff."""

from __future__ import annotations

import difflib
import json
from dataclasses import replace

from cuda_agent.agent.device_source import replace_span
from cuda_agent.agent.kernels import Span, find_launch_sites
from cuda_agent.agent.launch_sites import site_config
from cuda_agent.agent.spec import LaunchSpec, render_spec
from cuda_agent.agent.targets import KernelTarget, with_block


def _block_text(block: tuple[int, ...]) -> str:
    return "[" + ", ".join(str(b) for b in block) + "]"


def with_launch_block(target: KernelTarget, block: tuple[int, ...]) -> str:
    """The file with the kernel's block shape changed where the user will look for it: the spec's
    `block = [...]` value (an inferred spec is written out above the kernel), and `<<<grid, N>>>`
    launch sites of this kernel whose block is a plain number equal to the old one."""
    assert target.spec is not None
    old = target.spec.launch.block
    text = target.source
    # Edit from the end of the file backwards so earlier byte offsets stay valid.
    edits = []
    if len(old) == 1 and len(block) == 1:
        for site in find_launch_sites(text):
            if (
                site.kernel == target.kernel.name
                and len(site.config) >= 2
                and site.config[1].strip() == str(old[0])
            ):
                edits.append((site.config_span, _config_with_block(site.config, str(block[0]))))
    if target.spec.inferred:
        comment = render_spec(with_block(target.spec, block)) + "\n"
        kernel_start = target.kernel.span
        edits.append((_empty_span_at(kernel_start), comment))
    elif target.spec.block_span is not None:
        edits.append((target.spec.block_span, _block_text(block)))
    for span, new_text in sorted(edits, key=lambda e: e[0].start_byte, reverse=True):
        text = replace_span(text, span, new_text)
    return text


def _config_with_block(config: tuple[str, ...], block: str) -> str:
    parts = [p.strip() for p in config]
    parts[1] = block
    return ", ".join(parts)


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
    """The file with the kernel's whole launch (block, grid, dynamic shared memory) written where the
    user will look for it: the spec's values, or, for an inferred spec, the spec written out above the
    kernel. `source` is the file with the kernel already rewritten (the spec comment sits above the
    kernel, so its positions are the same there); default: the target's own text. A rewrite that changes
    how many threads cover the data uses this, so re-reading the file gives the launch it was verified
    with. Host `<<<...>>>` launches of the kernel are rewritten to match where the spec's sizes can be
    stated in the call's terms (agent/launch_sites.py); others are left as they were."""
    assert target.spec is not None
    text = target.source if source is None else source
    spec = replace(target.spec, launch=launch)
    edits = _site_edits(text, target, launch)
    if target.spec.inferred:
        edits.append((_empty_span_at(target.kernel.span), render_spec(spec) + "\n"))
        return _applied(text, edits)
    old = target.spec.launch
    spans = target.spec.value_spans
    if target.spec.block_span is not None and launch.block != old.block:
        edits.append((target.spec.block_span, _block_text(launch.block)))
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
    return _applied(text, edits)


def _site_edits(text: str, target: KernelTarget, launch: LaunchSpec) -> list[tuple[Span, str]]:
    assert target.spec is not None
    if launch == target.spec.launch:
        return []
    edits = []
    for site in find_launch_sites(text):
        if site.kernel == target.kernel.name:
            config = site_config(target.spec, target.kernel, launch, site)
            if config is not None:
                edits.append((site.config_span, config))
    return edits


def _applied(text: str, edits: list[tuple[Span, str]]) -> str:
    # From the end of the file backwards, so earlier byte offsets stay valid.
    for span, new_text in sorted(edits, key=lambda e: e[0].start_byte, reverse=True):
        text = replace_span(text, span, new_text)
    return text
