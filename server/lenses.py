"""Code lens above each kernel. Timings join "▶ Optimize" once optimization runs exist (next slice)."""

from __future__ import annotations

from cuda_agent.server.documents import Analysis
from cuda_agent.server.positions import span_range
from lsprotocol import types

OPTIMIZE_COMMAND = "cudaAgent.optimize"
ADD_SPEC_COMMAND = "cudaAgent.addSpec"


def code_lenses(analysis: Analysis, uri: str) -> list[types.CodeLens]:
    lenses = []
    for target in analysis.targets.targets:
        name = target.kernel.name
        if not name:
            continue
        # On the kernel's first line (a template's `template <...>`), where editors draw lenses above.
        first_line = span_range(analysis.lines, target.kernel.span).start.line
        where = types.Range(
            start=types.Position(line=first_line, character=0),
            end=types.Position(line=first_line, character=0),
        )
        lenses.append(
            types.CodeLens(
                range=where,
                command=types.Command(title="▶ Optimize", command=OPTIMIZE_COMMAND, arguments=[uri, name]),
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
