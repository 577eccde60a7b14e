"""What the client said it supports, read once at `initialize` into plain flags.

Every optional thing the server does is checked against these first: a request the client did not
declare (ALE declares neither `workspace/applyEdit` nor `window/workDoneProgress`, and answers no server
request at all) would go unanswered, and a feature it cannot show would be lost. Where a capability is
missing the server degrades: plain-text hover, edits inside the code action rather than on resolve or
through `workspace/applyEdit`, commands instead of code-action literals, progress as log messages.
"""

from __future__ import annotations

from dataclasses import dataclass

from lsprotocol import types


@dataclass(frozen=True)
class ClientSupport:
    apply_edit: bool  # workspace/applyEdit
    configuration: bool  # workspace/configuration
    work_done_progress: bool  # window/workDoneProgress/create
    lens_refresh: bool  # workspace/codeLens/refresh
    document_changes: bool  # versioned edits (and change annotations) in a WorkspaceEdit
    code_action_literals: bool  # CodeAction objects; without it, only Commands
    code_action_resolve_edit: bool  # an action's edit may come on codeAction/resolve, its `data` kept
    code_action_preferred: bool  # CodeAction.isPreferred
    code_action_disabled: bool  # CodeAction.disabled
    hover_markdown: bool  # the client renders Markdown hovers (its first choice among the two)
    # Our VS Code extension asks the user why after a Reject (`experimental.cudaAgent.rejectReasons`); other
    # clients get a Reject code action per reason.
    asks_reject_reason: bool = False

    @classmethod
    def of(cls, capabilities: types.ClientCapabilities) -> ClientSupport:
        workspace = capabilities.workspace
        window = capabilities.window
        document = capabilities.text_document
        action = document.code_action if document else None
        resolve = action.resolve_support if action else None
        hover = document.hover if document else None
        lens = workspace.code_lens if workspace else None
        edit = workspace.workspace_edit if workspace else None
        return cls(
            apply_edit=bool(workspace and workspace.apply_edit),
            configuration=bool(workspace and workspace.configuration),
            work_done_progress=bool(window and window.work_done_progress),
            lens_refresh=bool(lens and lens.refresh_support),
            document_changes=bool(edit and edit.document_changes),
            code_action_literals=bool(action and action.code_action_literal_support),
            code_action_resolve_edit=bool(
                action and action.data_support and resolve and "edit" in resolve.properties
            ),
            code_action_preferred=bool(action and action.is_preferred_support),
            code_action_disabled=bool(action and action.disabled_support),
            hover_markdown=_prefers_markdown(hover.content_format if hover else None),
            asks_reject_reason=_experimental(capabilities, "rejectReasons"),
        )


def _experimental(capabilities: types.ClientCapabilities, name: str) -> bool:
    """A flag our own client declares under `experimental.cudaAgent` (LSP's place for non-standard ones)."""
    ours = capabilities.experimental.get("cudaAgent") if isinstance(capabilities.experimental, dict) else None
    return isinstance(ours, dict) and ours.get(name) is True


def _prefers_markdown(formats: list[types.MarkupKind] | None) -> bool:
    """The client lists its formats in order of preference. One that lists none has not said it renders
    Markdown, and plain text reads right everywhere, so it gets plain text."""
    known = [f for f in formats or () if f in (types.MarkupKind.Markdown, types.MarkupKind.PlainText)]
    return bool(known) and known[0] == types.MarkupKind.Markdown


NOTHING = ClientSupport.of(
    types.ClientCapabilities()
)  # before `initialize`, and for a client that says nothing
