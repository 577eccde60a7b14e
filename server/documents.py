"""Per-document state, kept in memory: the text's version, its analysis (kernels, specs, spec errors) and
the last compile. Hover, code lens and code actions answer from here, never from the disk or a compiler.

An analysis is computed off the event loop (a huge file must not stall the editor) and is always tagged
with the version of the text it was computed from, so nothing computed for old text is shown as current.
"""

from __future__ import annotations

import asyncio
import bisect
import itertools
import logging
from collections.abc import Coroutine, Iterator, Sequence
from dataclasses import dataclass, field
from functools import cached_property
from pathlib import Path
from typing import Any

from cuda_agent.agent.kernels import EarlierRead, Kernel, StaleTree
from cuda_agent.agent.parsing import Reparse, edit_in_comment, parse_cuda, reparse
from cuda_agent.agent.targets import FileTargets, KernelTarget, TargetList, kernel_runs, load_targets
from cuda_agent.server.backend import FileCompile, KernelResources
from cuda_agent.server.positions import lines_after_edit, split_lines
from cuda_agent.server.rewrites import OptimizeResult
from pygls.uris import to_fs_path
from tree_sitter import Tree

logger = logging.getLogger(__name__)


@dataclass(frozen=True)
class Parsed:
    """The last analysed text, its tree and what was found in it, for the next edit: tree-sitter reparses
    around the edit, and the kernels, specs and lines the edit left alone are kept."""

    data: bytes
    tree: Tree
    kernels: Sequence[Kernel]  # a KernelRuns: its blocks carry their targets (targets.kernel_runs)
    targets: FileTargets
    lines: Sequence[str]  # a tuple, or after typing a positions.Lines
    # The comment the last edit was typed in, when the tree was not parsed again (parsing.edit_in_comment).
    comment: tuple[int, int] | None = None


@dataclass(frozen=True)
class Analysis:
    version: int
    targets: FileTargets
    lines: Sequence[str]  # a tuple, or after typing a positions.Lines

    def target_named(self, name: str) -> KernelTarget | None:
        return self.targets.named(name)

    def target_at(self, line: int, byte_column: int) -> KernelTarget | None:
        """The kernel whose definition holds the position (0-based line, UTF-8 byte column)."""
        return next((t for t in self.on_line(line) if t.kernel.contains(line, byte_column)), None)

    def name_at(self, line: int, byte_column: int) -> KernelTarget | None:
        """The named kernel whose name holds the position."""
        found = (t for t in self.on_line(line) if t.kernel.name and t.kernel.name_contains(line, byte_column))
        return next(found, None)

    def on_line(self, line: int) -> Iterator[KernelTarget]:
        """The kernels whose definitions span the line (and, where kernels nest, some before it), in source
        order, found by bisection: hover and code actions ask on every cursor move, and looking through a
        50,000-line file's 2,700 kernels took 3 ms. After an edit, by the runs of kept kernels (an index of
        every kernel's lines, made again for each edit, took 3 ms)."""
        targets = self.targets.targets
        if isinstance(targets, TargetList):
            indices = targets.kernels.on_line(line)
        else:
            starts, furthest = self.line_index
            indices = range(bisect.bisect_left(furthest, line), bisect.bisect_right(starts, line))
        for index in indices:
            yield targets[index]

    @cached_property
    def line_index(self) -> tuple[list[int], list[int]]:
        """Each kernel's first line, and the furthest last line of it and the kernels before it (kernels can
        nest, inside a broken one), in source order. Made by `analyse`, off the event loop."""
        kernels = [target.kernel for target in self.targets.targets]
        ends = (kernel.read.span.end_line + kernel.moved_by[1] for kernel in kernels)
        return [kernel.start_line for kernel in kernels], list(itertools.accumulate(ends, max))


@dataclass
class Document:
    uri: str
    path: Path
    version: int
    text: str
    analysis: Analysis | None = None
    compiled: FileCompile | None = None
    compiled_version: int | None = None
    # Resources survive edits (labelled "at last save" in hover): registers rarely move with a keystroke.
    resources: dict[str, KernelResources] = field(default_factory=dict)
    # Kernel name → the last optimization result, each for the version it was computed on.
    results: dict[str, OptimizeResult] = field(default_factory=dict)
    # Where the user last was (0-based line, UTF-16 character), from hovers and code-action requests
    # (editors ask for code actions as the cursor moves): that kernel is optimized first.
    cursor: tuple[int, int] | None = None
    # The code lenses last sent, and what they were made from (see lenses.code_lenses); and each kernel's
    # lenses by (name, line, spec inferred), with the result they show, for the next text's lenses.
    lenses: tuple[tuple[object, ...], list[Any]] | None = None
    lens_parts: dict[tuple[str, int, bool], tuple[object, list[Any]]] = field(default_factory=dict)
    # Each kernel's lenses as JSON split where their line goes, by (name, spec inferred), with their result.
    lens_templates: dict[tuple[str, bool], tuple[object, list[str]]] = field(default_factory=dict)
    # After an edit, each run of kernels' lenses with their JSON, for the next text's (lenses.LensRuns).
    lens_runs: dict[tuple[object, ...], Any] = field(default_factory=dict)
    # The kernels' diagnostics last published, with their JSON, for the next publish; after an edit, also
    # each run of kernels' (diagnostics.py).
    diagnostic_parts: dict[Any, Any] = field(default_factory=dict)
    diagnostic_runs: dict[Any, Any] = field(default_factory=dict)
    _analysing: tuple[int, asyncio.Task[tuple[Analysis, Parsed | None]]] | None = None
    _parsed: Parsed | None = None  # the last analysed text, its tree and what was found in it
    _debounce: asyncio.Task[None] | None = None
    _idle: asyncio.Task[None] | None = None  # the "optimize after idle" timer

    def current_compile(self) -> FileCompile | None:
        """The compile result, only while the text is exactly what was compiled."""
        return self.compiled if self.compiled_version == self.version else None

    def current_result(self, kernel: str) -> OptimizeResult | None:
        """The kernel's optimization result, only while the text is exactly what was optimized."""
        result = self.results.get(kernel)
        return result if result is not None and result.version == self.version else None

    def current_results(self) -> list[OptimizeResult]:
        return [r for r in self.results.values() if r.version == self.version]


def analyse(
    path: Path, text: str, version: int, previous: Parsed | None = None
) -> tuple[Analysis, Parsed | None]:
    """Discovery and specs for one version of a text, and its parse (for the next edit's incremental
    reparse from `previous`). Never raises: whatever the text, the server answers."""
    try:
        data = text.encode("utf-8")
        comment = None
        if previous is not None:
            edited, targets = _after_edit(path, text, data, previous)
            tree, comment = edited.tree, edited.comment
            lines = lines_after_edit(previous.lines, data, edited.edit)
        else:
            tree = parse_cuda(data)
            targets, lines = load_targets(path, text, tree, data=data), split_lines(text)
    except Exception:  # tree-sitter and the spec parser are robust, but a crash here would be the server's
        logger.exception("analysing %s failed", path)
        return Analysis(version, FileTargets(path, text, (), ()), split_lines(text)), None
    analysis = Analysis(version, targets, lines)
    if not isinstance(targets.targets, TargetList):
        analysis.line_index  # noqa: B018 (made now, on this thread: the first hover needs it)
    return analysis, Parsed(data, tree, kernel_runs(targets), targets, lines, comment)


def _after_edit(path: Path, text: str, data: bytes, previous: Parsed) -> tuple[Reparse, FileTargets]:
    """The text as one edit of the previous one: tree-sitter reparses only around it (~1 ms on 5,000 lines,
    not ~30) and says which kernels' syntax changed. An edit inside a comment between declarations is not
    parsed at all, when nothing must be read anew from the tree (what was found before only moved)."""
    edited = edit_in_comment(previous.data, previous.tree, data, previous.comment)
    if edited is not None:
        earlier = EarlierRead(previous.kernels, edited.edit, edited.changed, inert=True)
        try:
            return edited, load_targets(path, text, edited.tree, earlier, previous.targets, data=data)
        except StaleTree:
            pass
    edited = reparse(previous.data, previous.tree, data)
    earlier = EarlierRead(previous.kernels, edited.edit, edited.changed)
    return edited, load_targets(path, text, edited.tree, earlier, previous.targets, data=data)


def uri_path(uri: str) -> Path:
    """The file the compiler is told about (for `#include "..."` next to it); untitled buffers get a name."""
    try:
        path = to_fs_path(uri)
    except Exception:
        path = None
    return Path(path) if path else Path("untitled.cu")


class Documents:
    def __init__(self) -> None:
        self._documents: dict[str, Document] = {}

    def get(self, uri: str) -> Document | None:
        return self._documents.get(uri)

    def open(self, uri: str, version: int, text: str) -> Document:
        self.close(uri)
        document = Document(uri, uri_path(uri), version, text)
        self._documents[uri] = document
        return document

    def change(self, uri: str, version: int, text: str) -> Document:
        document = self._documents.get(uri)
        if document is None:
            return self.open(uri, version, text)
        document.version, document.text = version, text
        return document

    def close(self, uri: str) -> None:
        document = self._documents.pop(uri, None)
        if document is not None:
            cancel(document)

    def close_all(self) -> None:
        for uri in list(self._documents):
            self.close(uri)

    def is_current(self, document: Document, version: int) -> bool:
        """Whether `version` is still the open text's version (the document may also have been closed)."""
        return self._documents.get(document.uri) is document and document.version == version


def cancel(document: Document) -> None:
    if document._debounce is not None:
        document._debounce.cancel()
    if document._idle is not None:
        document._idle.cancel()
    if document._analysing is not None:
        document._analysing[1].cancel()


async def current_analysis(document: Document) -> Analysis:
    """The analysis of the document's current text, computing it now if the debounce has not yet.

    Loops because the text may change while a thread analyses it; each round takes one parse."""
    while True:
        analysis = document.analysis
        if analysis is not None and analysis.version == document.version:
            return analysis
        version = document.version
        if document._analysing is None or document._analysing[0] != version:
            task = asyncio.ensure_future(
                asyncio.to_thread(analyse, document.path, document.text, version, document._parsed)
            )
            document._analysing = (version, task)
        # Shielded: a cancelled request (or debounce) must not cancel the analysis others wait for.
        analysis, parsed = await asyncio.shield(document._analysing[1])
        if document.analysis is None or document.analysis.version < analysis.version:
            document.analysis, document._parsed = analysis, parsed
        if analysis.version == document.version:
            return analysis


def restart_timer(document: Document, work: Coroutine[object, object, None]) -> None:
    """Run `work` as the document's one pending debounced job, cancelling the one before (an edit
    restarts the timer, so a burst of keystrokes costs one analysis)."""
    if document._debounce is not None:
        document._debounce.cancel()
    document._debounce = asyncio.ensure_future(work)


def restart_idle_timer(document: Document, work: Coroutine[object, object, None] | None) -> None:
    """The same for the idle trigger's timer (None: just stop it)."""
    if document._idle is not None:
        document._idle.cancel()
    document._idle = asyncio.ensure_future(work) if work is not None else None
