"""Code lens above each kernel: "▶ Optimize" (after a search that found nothing faster, with the measured
time: "0.29 ms · 68% of roofline · ▶ Optimize"), or for a verified rewrite of exactly this text
"⚡ 1.27× verified · Apply · Reject" (three lenses on one line; editors draw them side by side)."""

from __future__ import annotations

import operator

from cuda_agent.agent.targets import KernelTarget, TargetList
from cuda_agent.server.documents import Analysis, Document
from cuda_agent.server.replies import Encoded, line_template
from cuda_agent.server.rewrites import OptimizeResult
from lsprotocol import types

OPTIMIZE_COMMAND = "cudaAgent.optimize"
ADD_SPEC_COMMAND = "cudaAgent.addSpec"
APPLY_COMMAND = "cudaAgent.applyRewrite"
REJECT_COMMAND = "cudaAgent.rejectRewrite"
CANCEL_COMMAND = "cudaAgent.cancelOptimization"


def code_lenses(analysis: Analysis, document: Document) -> Encoded[types.CodeLens]:
    """The lenses of the document as it is, kept until its text or its results change: editors ask
    again on every scroll and edit, and a big file has hundreds."""
    made_from = (analysis, document.version, *document.results.values())
    kept = document.lenses
    if kept is not None and len(kept[0]) == len(made_from) and all(map(operator.is_, kept[0], made_from)):
        return kept[1]
    found = _code_lenses(analysis, document)
    document.lenses = (made_from, found)
    return found


def _code_lenses(analysis: Analysis, document: Document) -> Encoded[types.CodeLens]:
    """Every kernel's lenses, and their JSON. An edit moves the kernels below it, usually by no line at all,
    so a kernel's lenses are taken from the last text's where its name, line, spec and result are the same
    (building a big file's ~500 lenses anew took most of a lens request after each keystroke); and its
    JSON from the last text's where all but its line are, with the line put in. After an edit, a whole run
    of kernels the edit left alone (targets.TargetList) takes its lenses and their JSON as they were, while
    its kernels' lines, specs and results are: a 50,000-line file's 2,700 kernels took 20 ms one by one."""
    maker = _LensMaker(analysis, document)
    targets = analysis.targets.targets
    if isinstance(targets, TargetList):
        lenses, encoded = _by_runs(targets, document, maker)
    else:
        lenses, encoded = [], []
        for target in targets:
            maker.add(target, lenses, encoded)
    maker.keep(len(targets), carry=isinstance(targets, TargetList))
    return Encoded(lenses, f"[{','.join(part for part in encoded if part)}]")


# A run's lenses by (id of its block, its first and last kernel, its lines' offset, the names in it with a
# spec written now, with a result now): the block, the results, the lenses and their JSON.
LensRuns = dict[tuple[object, ...], tuple[object, tuple[object, ...], list[types.CodeLens], str]]


def _by_runs(
    targets: TargetList, document: Document, maker: _LensMaker
) -> tuple[list[types.CodeLens], list[str]]:
    """The lenses and their JSON, run by run: a run whose kernels' lines, written specs and results are
    those its lenses were made with takes them again."""
    results = maker.results()
    written = targets.specs.keys() | targets.failed
    lenses: list[types.CodeLens] = []
    encoded: list[str] = []
    earlier, kept = document.lens_runs, {}
    for number, run in enumerate(targets.kernels.runs):
        block = run.block
        shown = tuple(sorted(filter(run.holds, results)))
        key = (id(block), run.lo, run.hi, run.lines_by, frozenset(filter(run.holds, written)), shown)
        found = earlier.get(key)
        run_results = tuple(results[name] for name in shown)
        if found is None or found[0] is not block or any(map(operator.is_not, found[1], run_results)):
            made: list[types.CodeLens] = []
            parts: list[str] = []
            first = targets.kernels.first_of(number)
            for index in range(first, first + run.hi - run.lo):
                maker.add(targets[index], made, parts)
            found = (block, run_results, made, ",".join(part for part in parts if part))
        kept[key] = found
        lenses += found[2]
        encoded.append(found[3])
    document.lens_runs = kept
    return lenses, encoded


class _LensMaker:
    """One kernel's lenses and their JSON, from those made for the text before where they can be."""

    def __init__(self, analysis: Analysis, document: Document) -> None:
        self.analysis, self.document = analysis, document
        self.earlier, self.parts = document.lens_parts, {}
        self.earlier_json, self.templates = document.lens_templates, {}

    def results(self) -> dict[str, OptimizeResult]:
        """The results shown: those for exactly this text."""
        if self.analysis.version != self.document.version:
            return {}
        return {result.kernel: result for result in self.document.current_results()}

    def add(self, target: KernelTarget, lenses: list[types.CodeLens], encoded: list[str]) -> None:
        name = target.kernel.name
        if not name:
            return
        document, lines = self.document, self.analysis.lines
        # On the kernel's first line (a template's `template <...>`), where editors draw lenses above; the
        # line needs no UTF-16 conversion (a big file's lenses spent 10 ms converting whole ranges).
        first_line = min(target.kernel.start_line, max(len(lines) - 1, 0))
        result = document.current_result(name) if self.analysis.version == document.version else None
        inferred = target.spec is not None and target.spec.inferred
        key = (name, first_line, inferred)
        # The pairs kept as they were, not made again: thousands of new objects a request set off
        # collections that paused it.
        kept = self.parts.get(key) or self.earlier.get(key)
        if kept is None or kept[0] is not result:
            kept = (result, _kernel_lenses(document.uri, key, result))
        self.parts[key] = kept
        lenses += kept[1]
        same = self.templates.get((name, inferred)) or self.earlier_json.get((name, inferred))
        if same is None or same[0] is not result:
            same = (result, line_template(kept[1]))
        self.templates[(name, inferred)] = same
        encoded.append(str(first_line).join(same[1]))

    def keep(self, kernels: int, carry: bool) -> None:
        """Keep what was made for the next text's lenses; with `carry` (runs whose lenses were taken whole
        made none), with what was kept before, while that is not many times the kernels."""
        parts, templates = self.parts, self.templates
        if carry and len(self.earlier) + len(parts) <= 3 * kernels + 100:
            parts = {**self.earlier, **parts}
        if carry:
            templates = {**self.earlier_json, **templates}
        self.document.lens_parts, self.document.lens_templates = parts, templates


def _kernel_lenses(
    uri: str, key: tuple[str, int, bool], result: OptimizeResult | None
) -> list[types.CodeLens]:
    name, line, inferred = key
    where = types.Range(
        start=types.Position(line=line, character=0), end=types.Position(line=line, character=0)
    )
    arguments = [uri, name]
    if result is not None and result.rewrite is not None:
        return [
            # An empty command id: a label, not clickable (VS Code draws it as plain text).
            types.CodeLens(
                range=where,
                command=types.Command(title=f"⚡ {result.rewrite.speedup:.2f}× verified", command=""),
            ),
            types.CodeLens(
                range=where, command=types.Command(title="Apply", command=APPLY_COMMAND, arguments=arguments)
            ),
            types.CodeLens(
                range=where,
                command=types.Command(title="Reject", command=REJECT_COMMAND, arguments=arguments),
            ),
        ]
    title = _measured(result) + "▶ Optimize"
    made = [
        types.CodeLens(
            range=where, command=types.Command(title=title, command=OPTIMIZE_COMMAND, arguments=arguments)
        )
    ]
    if inferred:
        spec = types.Command(title="spec inferred · Add spec", command=ADD_SPEC_COMMAND, arguments=arguments)
        made.append(types.CodeLens(range=where, command=spec))
    return made


def _measured(result: OptimizeResult | None) -> str:
    """ "0.29 ms · 68% of roofline · " once the kernel was measured for this text (and nothing was faster)."""
    if result is None or result.original is None:
        return ""
    original = result.original
    roofline = f"{original.roofline_fraction:.0%} of roofline · " if original.roofline_fraction else ""
    return f"{original.median_ms:.3g} ms · {roofline}"
