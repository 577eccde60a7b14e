"""Code actions. This slice: "Add benchmark spec", a quick fix that writes the inferred spec above the
kernel for the user to check and edit. Rewrites (`refactor.rewrite`, resolved lazily) come with GPU jobs."""

from __future__ import annotations

from cuda_agent.agent.spec import render_spec
from cuda_agent.agent.targets import KernelTarget
from cuda_agent.server.documents import Analysis
from cuda_agent.server.positions import span_range, to_byte_column
from lsprotocol import types

ADD_SPEC_TITLE = "Add benchmark spec"


def wanted(only: list[str] | None, kind: str) -> bool:
    """`context.only` holds kinds and their parents ("quickfix" asks for "quickfix.x" too)."""
    return not only or any(kind == k or kind.startswith(f"{k}.") for k in only)


def code_actions(
    analysis: Analysis, params: types.CodeActionParams, document_changes: bool
) -> list[types.CodeAction]:
    if not wanted(params.context.only, types.CodeActionKind.QuickFix):
        return []
    start = to_byte_column(analysis.lines, params.range.start)
    end = to_byte_column(analysis.lines, params.range.end)
    targets = {id(t): t for t in (analysis.target_at(*start), analysis.target_at(*end)) if t is not None}
    actions = []
    for target in targets.values():
        edit = add_spec_edit(analysis, params.text_document.uri, target, document_changes)
        if edit is not None:
            actions.append(
                types.CodeAction(
                    title=f"{ADD_SPEC_TITLE} for {target.kernel.name}",
                    kind=types.CodeActionKind.QuickFix,
                    edit=edit,
                )
            )
    return actions


def add_spec_edit(
    analysis: Analysis, uri: str, target: KernelTarget, document_changes: bool
) -> types.WorkspaceEdit | None:
    """The edit inserting the rendered inferred spec on the line above the kernel, or None when the
    kernel already has a written spec or none can be inferred."""
    if target.spec is None or not target.spec.inferred:
        return None
    line = span_range(analysis.lines, target.kernel.span).start.line
    at = types.Position(line=line, character=0)
    text_edit = types.TextEdit(range=types.Range(start=at, end=at), new_text=render_spec(target.spec) + "\n")
    if document_changes:
        # Versioned: a client refuses the edit if the text moved on since this analysis.
        return types.WorkspaceEdit(
            document_changes=[
                types.TextDocumentEdit(
                    text_document=types.OptionalVersionedTextDocumentIdentifier(
                        uri=uri, version=analysis.version
                    ),
                    edits=[text_edit],
                )
            ]
        )
    return types.WorkspaceEdit(changes={uri: [text_edit]})
