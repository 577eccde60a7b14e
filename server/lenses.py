"""Code lens above each kernel: "▶ Optimize" (after a search that found nothing faster, with the measured
time: "0.29 ms · 68% of roofline · ▶ Optimize"), or for a verified rewrite of exactly this text
"⚡ 1.27× verified · Apply · Reject" (three lenses on one line; editors draw them side by side)."""

from __future__ import annotations

import operator

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
    JSON from the last text's where all but its line are, with the line put in."""
    lenses: list[types.CodeLens] = []
    encoded: list[str] = []
    earlier, parts = document.lens_parts, {}
    earlier_json, templates = document.lens_templates, {}
    for target in analysis.targets.targets:
        name = target.kernel.name
        if not name:
            continue
        # On the kernel's first line (a template's `template <...>`), where editors draw lenses above; the
        # line needs no UTF-16 conversion (a big file's lenses spent 10 ms converting whole ranges).
        first_line = min(target.kernel.start_line, max(len(analysis.lines) - 1, 0))
        result = document.current_result(name) if analysis.version == document.version else None
        inferred = target.spec is not None and target.spec.inferred
        key = (name, first_line, inferred)
        # The pairs kept as they were, not made again: thousands of new objects a request set off
        # collections that paused it.
        kept = earlier.get(key)
        if kept is None or kept[0] is not result:
            kept = (result, _kernel_lenses(document.uri, key, result))
        parts[key] = kept
        lenses += kept[1]
        same = templates.get((name, inferred)) or earlier_json.get((name, inferred))
        if same is None or same[0] is not result:
            same = (result, line_template(kept[1]))
        templates[(name, inferred)] = same
        encoded.append(str(first_line).join(same[1]))
    document.lens_parts, document.lens_templates = parts, templates
    return Encoded(lenses, f"[{','.join(encoded)}]")


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
