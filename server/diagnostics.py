"""Diagnostics: spec errors and missing specs (cheap, on open and after edits), compiler errors and
warnings (on save). Always published with the version of the text they describe."""

from __future__ import annotations

from cuda_agent.server.backend import CompileProblem
from cuda_agent.server.documents import Analysis, Document
from cuda_agent.server.positions import byte_range, character_range, line_range, span_range
from lsprotocol import types

SOURCE = "cuda-agent"
SKIPPED_CODE = "analysis-skipped"  # reading one kernel failed inside cuda-agent; the others are unaffected

_SEVERITY = {
    "error": types.DiagnosticSeverity.Error,
    "warning": types.DiagnosticSeverity.Warning,
    "note": types.DiagnosticSeverity.Information,
}


def spec_diagnostics(analysis: Analysis) -> list[types.Diagnostic]:
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
    for target in analysis.targets.targets:
        if target.skipped and target.kernel.name:
            # Our failure, not the user's spec: a warning that says what this kernel lacks and why.
            found.append(
                types.Diagnostic(
                    range=span_range(lines, target.kernel.name_span),
                    message=f"{target.kernel.name}: {target.skipped}",
                    severity=types.DiagnosticSeverity.Warning,
                    source=SOURCE,
                    code=SKIPPED_CODE,
                )
            )
        # A kernel whose own spec is broken already has its errors; the note is for kernels with none.
        elif target.spec is None and target.kernel.name and target.kernel.name not in broken_specs:
            found.append(
                types.Diagnostic(
                    range=span_range(lines, target.kernel.name_span),
                    message=f"{target.kernel.name}: {target.note} (see agent/spec/README.md for the format)",
                    severity=types.DiagnosticSeverity.Information,
                    source=f"{SOURCE} spec",
                    code="no-spec",
                )
            )
    return found


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


def document_diagnostics(document: Document, analysis: Analysis) -> list[types.Diagnostic]:
    found = spec_diagnostics(analysis)
    compiled = document.current_compile()
    if compiled is not None and document.compiled_version == analysis.version:
        found += compile_diagnostics(analysis, compiled.problems, str(document.path))
    return found + rewrite_diagnostics(document, analysis)


def publish_params(document: Document, analysis: Analysis) -> types.PublishDiagnosticsParams:
    return types.PublishDiagnosticsParams(
        uri=document.uri, diagnostics=document_diagnostics(document, analysis), version=analysis.version
    )
