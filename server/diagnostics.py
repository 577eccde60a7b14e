"""Diagnostics: spec errors and missing specs (cheap, on open and after edits), compiler errors and
warnings (on save). Always published with the version of the text they describe."""

from __future__ import annotations

from collections.abc import Sequence

from cuda_agent.agent.targets import KernelTarget, TargetList
from cuda_agent.server.backend import CompileProblem
from cuda_agent.server.documents import Analysis, Document
from cuda_agent.server.positions import byte_range, character_range, line_range, span_range
from cuda_agent.server.replies import Encoded, encode, line_template
from lsprotocol import types

SOURCE = "cuda-agent"
SKIPPED_CODE = "analysis-skipped"  # reading one kernel failed inside cuda-agent; the others are unaffected

_SEVERITY = {
    "error": types.DiagnosticSeverity.Error,
    "warning": types.DiagnosticSeverity.Warning,
    "note": types.DiagnosticSeverity.Information,
}


def spec_diagnostics(analysis: Analysis, kept: KernelDiagnostics | None = None) -> list[types.Diagnostic]:
    """`kept`: the kernels' diagnostics last published, taken again where the edit left them alone."""
    lines = analysis.lines
    found = [
        types.Diagnostic(
            range=byte_range(lines, e.line, e.column, e.end_line, e.end_column),
            message=e.message,
            severity=types.DiagnosticSeverity.Error,
            source=f"{SOURCE} spec",
            code="spec-error",
        )
        for e in analysis.targets.spec_errors
    ]
    broken_specs = {e.kernel for e in analysis.targets.spec_errors}
    kept = kept or KernelDiagnostics({})
    targets = analysis.targets.targets
    if isinstance(targets, TargetList):
        return found + kept.by_runs(lines, targets, broken_specs)
    for target in targets:
        diagnostic = kept.of_target(lines, target, broken_specs)
        if diagnostic is not None:
            found.append(diagnostic)
    return found


# A kernel's diagnostic, by (id of the kernel as read, its name's line's text, message, code): the kernel as
# read, the diagnostic, and its JSON split where its line goes.
DiagnosticParts = dict[tuple[int, str, str, str], tuple[object, types.Diagnostic, list[str]]]
# After an edit, a run of kernels' diagnostics, by (id of its block, its first and last kernel, its lines'
# offset, the line moves since its notes were read, the names in it with a spec written now): the block,
# and each diagnostic with its JSON.
DiagnosticRuns = dict[tuple[object, ...], tuple[object, list[tuple[types.Diagnostic, str]]]]


class KernelDiagnostics:
    """The diagnostics on kernels' names for one publish, each with its JSON. Those of the publish before
    (`earlier`) are taken again while the kernel as read, its name's line's text and the message are the
    same, moved to the kernel's line now (making and encoding a 60,000-line file's thousand anew took
    50 ms an edit, on the event loop); after an edit, a whole run of kernels the edit left alone takes its
    diagnostics as they were (`earlier_runs`), while its lines and written specs are. `parts` and `runs`
    are this publish's, for the next."""

    def __init__(self, earlier: DiagnosticParts, earlier_runs: DiagnosticRuns | None = None) -> None:
        self.earlier, self.parts = earlier, {}
        self.earlier_runs, self.runs = earlier_runs or {}, {}
        self._encoded: dict[int, str] = {}  # id of a diagnostic in parts -> its JSON

    def of_target(
        self, lines: Sequence[str], target: KernelTarget, broken_specs: set[str | None]
    ) -> types.Diagnostic | None:
        """The diagnostic on the kernel's name, if it has one: a failure of ours, or why it has no spec."""
        name = target.kernel.name
        if target.skipped and name:
            # Our failure, not the user's spec: a warning that says what this kernel lacks and why.
            message, severity = f"{name}: {target.skipped}", types.DiagnosticSeverity.Warning
            source, code = SOURCE, SKIPPED_CODE
        # A kernel whose own spec is broken already has its errors; the note is for kernels with none.
        elif target.spec is None and name and name not in broken_specs:
            message = f"{name}: {target.note} (see agent/spec/README.md for the format)"
            severity, source, code = types.DiagnosticSeverity.Information, f"{SOURCE} spec", "no-spec"
        else:
            return None
        return self.on_name(lines, target, message, severity, source, code)

    def by_runs(
        self, lines: Sequence[str], targets: TargetList, broken_specs: set[str | None]
    ) -> list[types.Diagnostic]:
        """The kernels' diagnostics, run by run: a run whose lines and written specs are those its
        diagnostics were made with takes them again (a kept kernel's name, and what precedes it on its line,
        are as they were: an edit there would have read it anew)."""
        written = targets.specs.keys() | targets.failed | {name for name in broken_specs if name}
        found: list[types.Diagnostic] = []
        for number, run in enumerate(targets.kernels.runs):
            # the moves since: an edit that moved lines an inferred spec's note cites changes the note
            # ("line 211" of a launch below the edit), though not the kernels
            moved = len(targets.moves)
            key = (id(run.block), run.lo, run.hi, run.lines_by, moved, frozenset(filter(run.holds, written)))
            segment = self.earlier_runs.get(key)
            if segment is None or segment[0] is not run.block:
                pairs = []
                first = targets.kernels.first_of(number)
                for index in range(first, first + run.hi - run.lo):
                    diagnostic = self.of_target(lines, targets[index], broken_specs)
                    if diagnostic is not None:
                        pairs.append((diagnostic, self._encoded[id(diagnostic)]))
                segment = (run.block, pairs)
            else:
                for diagnostic, encoded in segment[1]:
                    self._encoded[id(diagnostic)] = encoded
            self.runs[key] = segment
            found += [diagnostic for diagnostic, _ in segment[1]]
        if len(self.earlier) + len(self.parts) <= 3 * len(targets) + 100:
            # Runs taken whole made no parts: those kept before stay, for the runs an edit splits next.
            self.parts = {**self.earlier, **self.parts}
        return found

    def on_name(
        self, lines: Sequence[str], target: KernelTarget, message: str,
        severity: types.DiagnosticSeverity, source: str, code: str,
    ) -> types.Diagnostic:  # fmt: skip
        kernel, read = target.kernel, target.kernel.read
        line = read.name_span.start_line + kernel.moved_by[1]
        key = (id(read), lines[line] if 0 <= line < len(lines) else "", message, code)
        found = self.parts.get(key) or self.earlier.get(key)
        if found is None or found[0] is not read:
            where = span_range(lines, kernel.name_span)
            diagnostic = types.Diagnostic(
                range=where, message=message, severity=severity, source=source, code=code
            )
            found = (read, diagnostic, line_template([diagnostic]))
        elif found[1].range.start.line != line:  # the same text, moved: its columns are the same
            before = found[1]
            where = types.Range(
                start=types.Position(line=line, character=before.range.start.character),
                end=types.Position(line=line, character=before.range.end.character),
            )
            moved = types.Diagnostic(
                range=where, message=message, severity=severity, source=source, code=code
            )
            found = (read, moved, found[2])
        self.parts[key] = found
        diagnostic = found[1]
        self._encoded[id(diagnostic)] = str(diagnostic.range.start.line).join(found[2])
        return diagnostic

    def encoded(self, diagnostics: list[types.Diagnostic]) -> Encoded[types.Diagnostic]:
        """`diagnostics` (these and others) with their JSON."""
        known = self._encoded
        return Encoded(diagnostics, f"[{','.join(known.get(id(d)) or encode(d) for d in diagnostics)}]")


def compile_diagnostics(
    analysis: Analysis, problems: tuple[CompileProblem, ...], path: str
) -> list[types.Diagnostic]:
    lines = analysis.lines
    fallback = analysis.targets.targets[0].kernel.name_span.start_line if analysis.targets.targets else 0
    found = []
    for problem in problems:
        message = problem.message
        elsewhere = problem.file is not None and problem.file != path
        if problem.line is None or elsewhere:
            # In an included header, or a ptxas message with no line: shown on the first kernel, saying where.
            where = f"{problem.file}:{problem.line}: " if elsewhere and problem.line else ""
            message = f"{where}{message}"
            where_range = line_range(lines, fallback)
        elif problem.column is None:
            where_range = line_range(lines, problem.line - 1)
        else:
            where_range = character_range(lines, problem.line - 1, problem.column - 1)
        found.append(
            types.Diagnostic(
                range=where_range,
                message=message,
                severity=_SEVERITY.get(problem.severity, types.DiagnosticSeverity.Information),
                source=problem.backend or "compiler",
            )
        )
    return found


REWRITE_CODE = "verified-rewrite"


def rewrite_diagnostics(document: Document, analysis: Analysis) -> list[types.Diagnostic]:
    """An Information diagnostic on each kernel with a verified faster rewrite for exactly this text;
    its `data` is the rewrite id the apply action is resolved from."""
    if analysis.version != document.version:
        return []
    found = []
    for result in document.current_results():
        target = analysis.target_named(result.kernel)
        if result.rewrite is None or target is None:
            continue
        found.append(
            types.Diagnostic(
                range=span_range(analysis.lines, target.kernel.name_span),
                message=result.headline(),
                severity=types.DiagnosticSeverity.Information,
                source=SOURCE,
                code=REWRITE_CODE,
                data=result.rewrite_id,
            )
        )
    return found


def document_diagnostics(document: Document, analysis: Analysis) -> Encoded[types.Diagnostic]:
    """Every diagnostic of the document's text, with their JSON (see replies.py)."""
    kept = KernelDiagnostics(document.diagnostic_parts, document.diagnostic_runs)
    found = spec_diagnostics(analysis, kept)
    document.diagnostic_parts, document.diagnostic_runs = kept.parts, kept.runs
    compiled = document.current_compile()
    if compiled is not None and document.compiled_version == analysis.version:
        found += compile_diagnostics(analysis, compiled.problems, str(document.path))
    return kept.encoded(found + rewrite_diagnostics(document, analysis))


def publish_params(document: Document, analysis: Analysis) -> types.PublishDiagnosticsParams:
    return types.PublishDiagnosticsParams(
        uri=document.uri, diagnostics=document_diagnostics(document, analysis), version=analysis.version
    )
