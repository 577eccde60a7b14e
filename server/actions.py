"""Code actions on the kernels under the range: "Add benchmark spec" (a quick fix writing the inferred
spec above the kernel), "Optimize kernel" (starts its job; "Cancel optimization" while it runs), and for a
verified rewrite of exactly this text "Apply verified rewrite" (`refactor.rewrite`, the edit built on
resolve from the rewrite id in `data`, as ruff-lsp does) and "Reject suggestion", beside it one Reject per
reason the user may give in one click ("Reject suggestion: unreadable", …), except for our VS Code
extension, which asks for the reason after its Reject.

They are everything the code lens offers, for clients without lenses (Emacs's eglot, Vim's ALE), and they
take the form the client can use (capabilities.py): the edit inside the action where the client cannot
resolve one, commands where it takes no CodeAction objects (leaving out the edits it could not apply)."""

from __future__ import annotations

import difflib
import re
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from cuda_agent.agent.feedback import REJECT_REASONS
from cuda_agent.agent.spec import render_spec
from cuda_agent.agent.targets import KernelTarget
from cuda_agent.server.capabilities import ClientSupport
from cuda_agent.server.diagnostics import REWRITE_CODE
from cuda_agent.server.documents import Analysis, Document, Documents
from cuda_agent.server.lenses import (
    ADD_SPEC_COMMAND,
    APPLY_COMMAND,
    CANCEL_COMMAND,
    OPTIMIZE_COMMAND,
    REJECT_COMMAND,
)
from cuda_agent.server.positions import span_range, to_byte_column
from cuda_agent.server.rewrites import OptimizeResult
from lsprotocol import types

from cuda_agent.line_endings import in_line_endings_of

ADD_SPEC_TITLE = "Add benchmark spec"
OPTIMIZE_TITLE = "Optimize kernel"
CANCEL_TITLE = "Cancel optimization"
REJECT_TITLE = "Reject suggestion"
REWRITE_ANNOTATION = "cuda-agent.verified-rewrite"
KINDS = [
    types.CodeActionKind.QuickFix,
    types.CodeActionKind.Refactor,
    types.CodeActionKind.RefactorRewrite,
]


def wanted(only: list[str] | None, kind: str) -> bool:
    """`context.only` holds kinds and their parents ("quickfix" asks for "quickfix.x" too)."""
    return not only or any(kind == k or kind.startswith(f"{k}.") for k in only)


@dataclass(frozen=True)
class Offer:
    action: types.CodeAction
    # The same as a command, for clients that take no CodeAction objects; None where that would need an
    # edit the client cannot be sent (no workspace/applyEdit).
    command: types.Command | None


def code_actions(
    analysis: Analysis,
    document: Document,
    params: types.CodeActionParams,
    support: ClientSupport,
    searching: Callable[[str], bool] = lambda _: False,
) -> list[types.CodeAction | types.Command]:
    """`searching(kernel)`: whether the kernel's optimization is running or queued."""
    only, uri = params.context.only, params.text_document.uri
    start = to_byte_column(analysis.lines, params.range.start)
    end = to_byte_column(analysis.lines, params.range.end)
    targets = {id(t): t for t in (analysis.target_at(*start), analysis.target_at(*end)) if t is not None}
    offers: list[Offer] = []
    for target in targets.values():
        name = target.kernel.name
        result = document.current_result(name) if analysis.version == document.version else None
        if (
            result is not None
            and result.rewrite is not None
            and wanted(only, types.CodeActionKind.RefactorRewrite)
        ):
            offers += rewrite_offers(result, params.context.diagnostics, document, support)
        edit = add_spec_edit(analysis, uri, target, support.document_changes)
        if edit is not None and wanted(only, types.CodeActionKind.QuickFix):
            title = f"{ADD_SPEC_TITLE} for {name}"
            action = types.CodeAction(title=title, kind=types.CodeActionKind.QuickFix, edit=edit)
            offers.append(Offer(action, _via(support, title, ADD_SPEC_COMMAND, [uri, name])))
        if name and target.spec is not None and wanted(only, types.CodeActionKind.Refactor):
            # While it runs, stopping it is the action (clients without progress have no other way).
            title, command = (
                (f"{CANCEL_TITLE}: {name}", CANCEL_COMMAND)
                if searching(name)
                else (f"{OPTIMIZE_TITLE}: {name}", OPTIMIZE_COMMAND)
            )
            run = types.Command(title=title, command=command, arguments=[uri, name])
            action = types.CodeAction(title=title, kind=types.CodeActionKind.Refactor, command=run)
            offers.append(Offer(action, run))
    if support.code_action_literals:
        return [offer.action for offer in offers]
    return [offer.command for offer in offers if offer.command is not None]


def _via(support: ClientSupport, title: str, command: str, arguments: list[Any]) -> types.Command | None:
    """The command that makes an action's edit through workspace/applyEdit, where the client takes that."""
    return types.Command(title=title, command=command, arguments=arguments) if support.apply_edit else None


def rewrite_offers(
    result: OptimizeResult, diagnostics: list[types.Diagnostic], document: Document, support: ClientSupport
) -> list[Offer]:
    """Apply and Reject, tied to the diagnostic that announced the rewrite. Apply's edit comes on resolve
    (from `data`) where the client resolves edits, else inside the action."""
    assert result.rewrite is not None
    # By `data`, or for a client that drops a diagnostic's data, by its code and message.
    announced = [
        d for d in diagnostics
        if d.data == result.rewrite_id or (d.code == REWRITE_CODE and d.message == result.headline())
    ] or None  # fmt: skip
    title = f"Apply verified rewrite: {result.rewrite.speedup:.2f}× faster"
    lazy = support.code_action_resolve_edit
    apply = types.CodeAction(
        title=title,
        kind=types.CodeActionKind.RefactorRewrite,
        diagnostics=announced,
        is_preferred=True if support.code_action_preferred else None,
        edit=None if lazy else rewrite_edit(document, result, support.document_changes),
        data=result.rewrite_id if lazy else None,
    )
    rejects = [(REJECT_TITLE, [result.uri, result.kernel])]
    if not support.asks_reject_reason:
        rejects += [(f"{REJECT_TITLE}: {r}", [result.uri, result.kernel, r]) for r in REJECT_REASONS]
    offers = [Offer(apply, _via(support, title, APPLY_COMMAND, [result.uri, result.kernel]))]
    for reject_title, arguments in rejects:
        reject = types.Command(title=reject_title, command=REJECT_COMMAND, arguments=arguments)
        kind = types.CodeActionKind.RefactorRewrite
        action = types.CodeAction(title=reject_title, kind=kind, diagnostics=announced, command=reject)
        offers.append(Offer(action, reject))
    return offers


def resolve_code_action(
    action: types.CodeAction, documents: Documents, support: ClientSupport
) -> types.CodeAction:
    """Give an apply action its edit, if its rewrite is still the current one for exactly this text."""
    result = rewrite_for(documents, action.data)
    if result is None:
        stale = isinstance(action.data, dict) and "candidate" in action.data
        if stale and support.code_action_disabled:
            action.disabled = types.CodeActionDisabled(
                reason="the text changed since this rewrite was verified"
            )
        return action
    action.edit = rewrite_edit(documents.get(result.uri), result, support.document_changes)  # type: ignore[arg-type]
    return action


def rewrite_for(documents: Documents, rewrite_id: Any) -> OptimizeResult | None:
    """The result a rewrite id names, only while the document is at its version with that candidate."""
    if not isinstance(rewrite_id, dict):
        return None
    document = documents.get(str(rewrite_id.get("uri")))
    result = document.current_result(str(rewrite_id.get("kernel"))) if document else None
    if result is None or result.rewrite is None or result.rewrite_id != rewrite_id:
        return None
    return result


def rewrite_edit(document: Document, result: OptimizeResult, document_changes: bool) -> types.WorkspaceEdit:
    """The verified file (kernel, spec launch and launch sites) as edits of the lines that differ, all
    under one annotation so that clients show it for confirmation before applying; a preview then shows
    the changed lines, not the whole file replaced."""
    assert result.rewrite is not None
    rewrite = result.rewrite
    changes = changed_lines(document.text, in_line_endings_of(document.text, rewrite.source))
    if not document_changes:  # annotations travel only in documentChanges
        return types.WorkspaceEdit(
            changes={result.uri: [types.TextEdit(range=where, new_text=text) for where, text in changes]}
        )
    assumptions = "; ".join(rewrite.assumptions) or "none beyond the spec"
    annotation = types.ChangeAnnotation(
        label=f"Verified rewrite of {result.kernel}: {rewrite.speedup:.2f}× faster",
        needs_confirmation=True,
        description=(
            f"{rewrite.description}. Verified on {result.gpu} with {result.input_sets} input sets at "
            f"{result.sizes} sizes; assumes: {assumptions}."
            + "".join(f" Note: {note}." for note in rewrite.notes)
        ),
    )
    edits: list[types.TextEdit | types.AnnotatedTextEdit | types.SnippetTextEdit] = [
        types.AnnotatedTextEdit(range=where, new_text=text, annotation_id=REWRITE_ANNOTATION)
        for where, text in changes
    ]
    return types.WorkspaceEdit(
        document_changes=[
            types.TextDocumentEdit(
                text_document=types.OptionalVersionedTextDocumentIdentifier(
                    uri=result.uri, version=result.version
                ),
                edits=edits,
            )
        ],
        change_annotations={REWRITE_ANNOTATION: annotation},
    )


# A line with its end, as LSP counts lines (str.splitlines also splits at \f, \x1c, U+2028, ...).
_LINE = re.compile(r"[^\r\n]*(?:\r\n|\r|\n)|[^\r\n]+\Z")


def changed_lines(old: str, new: str) -> list[tuple[types.Range, str]]:
    """Edits that turn `old` into `new`, one per run of changed lines (difflib's line matching)."""
    old_lines, new_lines = _LINE.findall(old), _LINE.findall(new)

    def position(line: int) -> types.Position:
        if line < len(old_lines) or not old_lines or old_lines[-1].endswith(("\n", "\r")):
            return types.Position(line=line, character=0)
        last = old_lines[-1]  # the end of a text without a final newline: after its last character
        return types.Position(line=len(old_lines) - 1, character=len(last.encode("utf-16-le")) // 2)

    matcher = difflib.SequenceMatcher(a=old_lines, b=new_lines, autojunk=False)
    return [
        (types.Range(start=position(i1), end=position(i2)), "".join(new_lines[j1:j2]))
        for tag, i1, i2, j1, j2 in matcher.get_opcodes()
        if tag != "equal"
    ]


def add_spec_edit(
    analysis: Analysis, uri: str, target: KernelTarget, document_changes: bool
) -> types.WorkspaceEdit | None:
    """The edit inserting the rendered inferred spec on the line above the kernel, or None when the
    kernel already has a written spec or none can be inferred."""
    if target.spec is None or not target.spec.inferred:
        return None
    line = span_range(analysis.lines, target.kernel.span).start.line
    at = types.Position(line=line, character=0)
    spec = in_line_endings_of(analysis.targets.source, render_spec(target.spec) + "\n")
    text_edit = types.TextEdit(range=types.Range(start=at, end=at), new_text=spec)
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
