"""Code lens above each kernel: "▶ Optimize" (after a search that found nothing faster, with the measured
time: "0.29 ms · 68% of roofline · ▶ Optimize"), or for a verified rewrite of exactly this text
"⚡ 1.27× verified · Apply · Reject" (three lenses on one line; editors draw them side by side)."""

from __future__ import annotations

import operator

from cuda_agent.server.documents import Analysis, Document
from cuda_agent.server.rewrites import OptimizeResult
from lsprotocol import types

OPTIMIZE_COMMAND = "cudaAgent.optimize"
ADD_SPEC_COMMAND = "cudaAgent.addSpec"
APPLY_COMMAND = "cudaAgent.applyRewrite"
REJECT_COMMAND = "cudaAgent.rejectRewrite"
CANCEL_COMMAND = "cudaAgent.cancelOptimization"


def code_lenses(analysis: Analysis, document: Document) -> list[types.CodeLens]:
    """The lenses of the document as it is, kept until its text or its results change: editors ask
    again on every scroll and edit, and a big file has hundreds."""
    made_from = (analysis, document.version, *document.results.values())
    kept = document.lenses
    if kept is not None and len(kept[0]) == len(made_from) and all(map(operator.is_, kept[0], made_from)):
        return kept[1]
    found = _code_lenses(analysis, document)
    document.lenses = (made_from, found)
    return found


def _code_lenses(analysis: Analysis, document: Document) -> list[types.CodeLens]:
    uri = document.uri
    lenses = []
    for target in analysis.targets.targets:
        name = target.kernel.name
        if not name:
            continue
        # On the kernel's first line (a template's `template <...>`), where editors draw lenses above; the
        # line needs no UTF-16 conversion (a big file's lenses spent 10 ms converting whole ranges).
        first_line = min(target.kernel.span.start_line, max(len(analysis.lines) - 1, 0))
        where = types.Range(
            start=types.Position(line=first_line, character=0),
            end=types.Position(line=first_line, character=0),
        )
        result = document.current_result(name) if analysis.version == document.version else None
        if result is not None and result.rewrite is not None:
            arguments = [uri, name]
            lenses += [
                # An empty command id: a label, not clickable (VS Code draws it as plain text).
                types.CodeLens(
                    range=where,
                    command=types.Command(title=f"⚡ {result.rewrite.speedup:.2f}× verified", command=""),
                ),
                types.CodeLens(
                    range=where,
                    command=types.Command(title="Apply", command=APPLY_COMMAND, arguments=arguments),
                ),
                types.CodeLens(
                    range=where,
                    command=types.Command(title="Reject", command=REJECT_COMMAND, arguments=arguments),
                ),
            ]
            continue
        lenses.append(
            types.CodeLens(
                range=where,
                command=types.Command(
                    title=_measured(result) + "▶ Optimize", command=OPTIMIZE_COMMAND, arguments=[uri, name]
                ),
            )
        )
        if target.spec is not None and target.spec.inferred:
            lenses.append(
                types.CodeLens(
                    range=where,
                    command=types.Command(
                        title="spec inferred · Add spec", command=ADD_SPEC_COMMAND, arguments=[uri, name]
                    ),
                )
            )
    return lenses


def _measured(result: OptimizeResult | None) -> str:
    """ "0.29 ms · 68% of roofline · " once the kernel was measured for this text (and nothing was faster)."""
    if result is None or result.original is None:
        return ""
    original = result.original
    roofline = f"{original.roofline_fraction:.0%} of roofline · " if original.roofline_fraction else ""
    return f"{original.median_ms:.3g} ms · {roofline}"
