"""The user's decision as the feedback log records it, from the real server over stdio with the recorded GPU
worker: a Reject with its one-click reason (a code action per reason for plain LSP clients; our VS Code
extension asks after its one Reject and sends the reason itself), carried into the exported preference pairs
and the dataset card; and an accept only when the document's text became the rewrite (not when a client
says it applied an edit, which VS Code's refactor preview may have applied in part), CRLF files included."""

from __future__ import annotations

import json
import tempfile
from dataclasses import replace
from pathlib import Path

import pytest_lsp
from cuda_agent.agent.candidate_log import CandidateLog
from cuda_agent.agent.feedback import REJECT_REASONS, FeedbackRecord, read_records
from cuda_agent.agent.feedback_export import export
from cuda_agent.agent.targets import load_targets
from cuda_agent.server.actions import rewrite_edit
from cuda_agent.server.documents import Documents
from cuda_agent.server.feedback import SuggestionFeedback
from lsprotocol import types
from pytest_lsp import ClientServerConfig, LanguageClient, client_capabilities

from tests.server_support import (
    SERVE,
    SERVER_ENV,
    apply_text_edits,
    diagnostics_for,
    edits_for,
    replace_text,
    wait_until,
)
from tests.test_server_jobs import (
    ELEMENTWISE,
    JOB_TIMEOUT_S,
    RECORDING,
    is_rewrite,
    make_client,
    open_and_optimize,
    rewrite_actions,
)
from tests.test_server_results import RESULT

WORKSPACE = Path(tempfile.mkdtemp(prefix="cuda-agent-decisions-"))
LOG = WORKSPACE / ".cuda-agent" / "feedback.jsonl"
REJECT = "cudaAgent.rejectRewrite"


def make_editing_client() -> LanguageClient:
    """The jobs tests' client, answering workspace/applyEdit as an editor would: it applies the edit to its
    text and sends the change (`client.apply = "all"`), or applies none of it and still answers applied, as
    VS Code's refactor preview does with every change unticked (`"none"`)."""
    client = make_client()
    client.apply = "all"  # type: ignore[attr-defined]
    client.texts = {}  # type: ignore[attr-defined]  # uri → (version, text), as the editor holds them

    @client.feature(types.WORKSPACE_APPLY_EDIT)
    def apply_edit(params: types.ApplyWorkspaceEditParams) -> types.ApplyWorkspaceEditResult:
        if client.apply == "all":  # type: ignore[attr-defined]
            for uri, (version, text) in list(client.texts.items()):  # type: ignore[attr-defined]
                edits = edits_for(params.edit, uri)
                if edits:
                    edited(client, uri, apply_text_edits(text, edits), version + 1)
        return types.ApplyWorkspaceEditResult(applied=True)

    return client


def edited(client: LanguageClient, uri: str, text: str, version: int) -> None:
    client.texts[uri] = (version, text)  # type: ignore[attr-defined]
    replace_text(client, uri, text, version)


def config() -> ClientServerConfig:
    return ClientServerConfig(
        server_command=SERVE,
        server_env={
            **SERVER_ENV,
            "CUDA_AGENT_RECORDED_WORKER": str(RECORDING),
            "CUDA_AGENT_CACHE_DIR": tempfile.mkdtemp(prefix="cuda-agent-decisions-cache-"),
        },
        client_factory=make_editing_client,
    )


async def initialize_plain(client: LanguageClient) -> None:
    """As a plain LSP client (VS Code's capabilities, not our extension's)."""
    await client.initialize_session(
        types.InitializeParams(
            capabilities=client_capabilities("visual-studio-code"), root_uri=WORKSPACE.as_uri()
        )
    )


@pytest_lsp.fixture(config=config())
async def client(lsp_client: LanguageClient):
    """A plain LSP client."""
    await initialize_plain(lsp_client)
    yield
    await lsp_client.shutdown_session()


@pytest_lsp.fixture(config=config())
async def bare(lsp_client: LanguageClient):
    """A client that declares nothing optional (as Vim's ALE): its code actions come as plain commands."""
    await lsp_client.initialize_session(
        types.InitializeParams(capabilities=types.ClientCapabilities(), root_uri=WORKSPACE.as_uri())
    )
    yield
    await lsp_client.shutdown_session()


@pytest_lsp.fixture(config=config())
async def extension(lsp_client: LanguageClient):
    """Our VS Code extension: it declares that it asks for the reason itself (vscode-client/src/server.ts)."""
    capabilities = client_capabilities("visual-studio-code")
    capabilities.experimental = {"cudaAgent": {"rejectReasons": True}}
    await lsp_client.initialize_session(
        types.InitializeParams(capabilities=capabilities, root_uri=WORKSPACE.as_uri())
    )
    yield
    await lsp_client.shutdown_session()


@pytest_lsp.fixture(config=config())
async def leaving(lsp_client: LanguageClient):
    """A plain client that ends the session itself in the test, as an editor that kills the server after
    `exit`."""
    await initialize_plain(lsp_client)
    yield


def variant(name: str) -> str:
    """The file's own text: each test's suggestions are told apart in the shared workspace log by it."""
    return ELEMENTWISE.replace("// Element-wise", f"// {name}: element-wise")


def records_of(text: str) -> list[FeedbackRecord]:
    found = read_records(LOG) if LOG.is_file() else []
    return [r for r in found if r.original.file_text == text]


async def shown(client: LanguageClient, name: str, text: str) -> tuple[str, list[types.Diagnostic]]:
    uri = await open_and_optimize(client, WORKSPACE, name, text)
    client.texts[uri] = (1, text)  # type: ignore[attr-defined]
    diagnostics = await diagnostics_for(client, uri, 1, lambda ds: any(map(is_rewrite, ds)), JOB_TIMEOUT_S)
    await wait_until(lambda: records_of(text), 5.0, "the shown record")
    return uri, [d for d in diagnostics if is_rewrite(d)]


async def test_a_plain_client_rejects_with_a_reason_in_one_click(bare: LanguageClient, tmp_path: Path):
    client = bare
    text = variant("Numerics")
    uri, diagnostics = await shown(client, "reasons.cu", text)
    commands = await rewrite_actions(client, uri, diagnostics)
    assert all(isinstance(c, types.Command) for c in commands), commands
    assert [c.title for c in commands] == [  # no Apply: it would need an edit this client cannot take
        "Reject suggestion",
        *(f"Reject suggestion: {reason}" for reason in REJECT_REASONS),
    ]
    chosen = next(c for c in commands if c.title == "Reject suggestion: changes numerics I care about")
    answer = await client.workspace_execute_command_async(
        types.ExecuteCommandParams(command=chosen.command, arguments=chosen.arguments)
    )
    assert answer == {"rejected": True}
    found = await wait_until(lambda: len(records_of(text)) >= 2 and records_of(text), 5.0, "the reject")
    assert [(r.event, r.reason) for r in found] == [
        ("shown", None),
        ("rejected", "changes numerics I care about"),
    ]
    # The suggestion is gone: no Reject (with or without a reason) to choose any more.
    assert await rewrite_actions(client, uri, diagnostics) == []

    # The export carries the reason into the user's pair, and the card counts it.
    summary = export(LOG, tmp_path / "out", formats=("preferences", "rewards"))
    pairs = [json.loads(line) for line in (tmp_path / "out" / "preferences.jsonl").read_text().splitlines()]
    (user,) = [p for p in pairs if p["source"] == "user" and p["rejected"] == found[0].candidate.source]
    assert user["chosen"] == text and user["rejected_decision"] == "rejected"
    assert user["rejected_reason"] == "changes numerics I care about"
    rows = [json.loads(line) for line in (tmp_path / "out" / "rewards.jsonl").read_text().splitlines()]
    rewrite = found[0].candidate.source
    decided = [r for r in rows if r["decision"] == "rejected" and r["completion"] == rewrite]
    assert decided and {r["decision_reason"] for r in decided} == {"changes numerics I care about"}
    card = (tmp_path / "out" / "README.md").read_text()
    assert "`rejected_reason`" in card and '"slower on my real sizes"' in card
    assert summary.rejections["changes numerics I care about"] >= 1
    assert "changes numerics I care about" in card.split("rejected by users:")[1].split("\n")[0]


async def test_a_plain_reject_records_no_reason(client: LanguageClient):
    text = variant("Plain")
    uri, diagnostics = await shown(client, "plain.cu", text)
    assert [a.title for a in await rewrite_actions(client, uri, diagnostics)] == [
        "Apply verified rewrite: 1.27× faster",
        "Reject suggestion",
        *(f"Reject suggestion: {reason}" for reason in REJECT_REASONS),
    ]
    await client.workspace_execute_command_async(
        types.ExecuteCommandParams(command=REJECT, arguments=[uri, "saxpy"])
    )
    found = await wait_until(lambda: len(records_of(text)) >= 2 and records_of(text), 5.0, "the reject")
    assert [(r.event, r.reason) for r in found] == [("shown", None), ("rejected", None)]
    raw = [json.loads(line) for line in LOG.read_text().splitlines() if found[1].suggestion_id in line]
    # Written as null, not left out: every decision record has the field.
    assert [(r["event"], r["reason"]) for r in raw] == [("shown", None), ("rejected", None)]


async def test_the_reject_is_in_the_log_when_shutdown_is_answered(leaving: LanguageClient):
    # Emacs's jsonrpc kills the server as soon as it has sent `exit`: what the log will hold must be
    # written by the time `shutdown` is answered, not when the process leaves.
    client = leaving
    text = variant("Leaving")
    uri, _ = await shown(client, "leaving.cu", text)
    await client.workspace_execute_command_async(
        types.ExecuteCommandParams(command=REJECT, arguments=[uri, "saxpy", REJECT_REASONS[0]])
    )
    await client.shutdown_async(None)
    assert [(r.event, r.reason) for r in records_of(text)] == [
        ("shown", None),
        ("rejected", REJECT_REASONS[0]),
    ]
    client.exit(None)


async def test_a_reason_none_of_the_offered_is_refused_and_decides_nothing(client: LanguageClient):
    text = variant("Refused")
    uri, diagnostics = await shown(client, "refused.cu", text)
    answer = await client.workspace_execute_command_async(
        types.ExecuteCommandParams(command=REJECT, arguments=[uri, "saxpy", "too clever"])
    )
    assert answer["rejected"] is False and "'too clever' is none of" in answer["reason"]
    assert '"wrong assumption"' in answer["reason"]
    await wait_until(lambda: any("too clever" in m.message for m in client.messages), 5.0, "the message")
    assert [r.event for r in records_of(text)] == ["shown"]
    assert "Reject suggestion" in [a.title for a in await rewrite_actions(client, uri, diagnostics)]


async def test_our_extension_gets_one_reject_and_sends_the_reason_itself(extension: LanguageClient):
    client = extension
    text = variant("Extension")
    uri, diagnostics = await shown(client, "extension.cu", text)
    titles = [a.title for a in await rewrite_actions(client, uri, diagnostics)]
    assert titles == ["Apply verified rewrite: 1.27× faster", "Reject suggestion"]
    # As vscode-client/src/commands.ts sends it after the quick pick.
    answer = await client.workspace_execute_command_async(
        types.ExecuteCommandParams(command=REJECT, arguments=[uri, "saxpy", "unreadable"])
    )
    assert answer == {"rejected": True}
    found = await wait_until(lambda: len(records_of(text)) >= 2 and records_of(text), 5.0, "the reject")
    assert [(r.event, r.reason) for r in found] == [("shown", None), ("rejected", "unreadable")]
    said = [m.message for m in client.messages]
    assert "Rejected the suggested rewrite of saxpy (unreadable)" in said


async def test_applied_but_not_made_the_rewrite_is_not_accepted(client: LanguageClient):
    """The lens's Apply, answered `applied` by a client that applied none of it (every change unticked in
    VS Code's refactor preview): the text is not the rewrite, so the next edit supersedes it."""
    text = variant("Unticked")
    uri, _ = await shown(client, "unticked.cu", text)
    client.apply = "none"  # type: ignore[attr-defined]
    answer = await client.workspace_execute_command_async(
        types.ExecuteCommandParams(command="cudaAgent.applyRewrite", arguments=[uri, "saxpy"])
    )
    assert answer == {"applied": True, "reason": ""}
    await diagnostics_for(client, uri, 1)  # a round trip: a decision would be in the log by now
    assert [r.event for r in records_of(text)] == ["shown"]
    edited(client, uri, text.replace("// Unticked", "// My own"), version=2)
    found = await wait_until(lambda: len(records_of(text)) >= 2 and records_of(text), 5.0, "the decision")
    assert [r.event for r in found] == ["shown", "superseded"]


async def test_applied_through_the_lens_is_accepted_once_the_text_is_the_rewrite(client: LanguageClient):
    text = variant("Lens")
    uri, _ = await shown(client, "lens.cu", text)
    client.apply = "all"  # type: ignore[attr-defined]
    answer = await client.workspace_execute_command_async(
        types.ExecuteCommandParams(command="cudaAgent.applyRewrite", arguments=[uri, "saxpy"])
    )
    assert answer == {"applied": True, "reason": ""}
    found = await wait_until(lambda: len(records_of(text)) >= 2 and records_of(text), 5.0, "the decision")
    assert [r.event for r in found] == ["shown", "accepted"]
    assert client.texts[uri][1] == found[0].candidate.source  # type: ignore[attr-defined]
    edited(client, uri, found[0].candidate.source + "\n", version=3)  # decides nothing more
    await diagnostics_for(client, uri, 3)
    assert [r.event for r in records_of(text)] == ["shown", "accepted"]


async def test_a_crlf_file_made_the_rewrite_is_accepted(client: LanguageClient):
    """The rewrite's lines take a CRLF file's line ends when applied: that text is the rewrite."""
    text = variant("Windows").replace("\n", "\r\n")
    uri, diagnostics = await shown(client, "windows.cu", text)
    apply = (await rewrite_actions(client, uri, diagnostics))[0]
    resolved = await client.code_action_resolve_async(apply)
    assert resolved.edit is not None
    new_text = apply_text_edits(text, edits_for(resolved.edit, uri))
    assert "block = [256]\r\n" in new_text and "\n" not in new_text.replace("\r\n", "")
    edited(client, uri, new_text, version=2)
    found = await wait_until(lambda: len(records_of(text)) >= 2 and records_of(text), 5.0, "the decision")
    assert [r.event for r in found] == ["shown", "accepted"]


def test_a_crlf_file_made_a_rewrite_of_lf_lines_is_accepted(tmp_path: Path):
    """A rewrite made with `\\n` lines (as inserted lines are), applied to a CRLF file by the code action's
    edit, leaves the file in CRLF: that text is the rewrite, and accepted."""
    crlf = ELEMENTWISE.replace("\n", "\r\n")
    result = replace(RESULT, rewrite=replace(RESULT.rewrite, source=ELEMENTWISE.replace("[128]", "[256]")))
    target = load_targets(Path("elementwise.cu"), crlf).find("saxpy")
    assert target is not None and result.rewrite is not None
    documents = Documents()
    document = documents.open(result.uri, result.version, crlf)
    edit = rewrite_edit(document, result, document_changes=True)
    applied = apply_text_edits(crlf, edits_for(edit, result.uri))
    assert "block = [256]\r\n" in applied and applied != result.rewrite.source
    feedback = SuggestionFeedback(CandidateLog())
    feedback.configure(tmp_path, enabled=True)
    feedback.shown(crlf, target, result)
    feedback.text_changed(result.uri, result.version + 1, applied)
    feedback.flush()
    assert [r.event for r in read_records(feedback.log_path)] == ["shown", "accepted"]  # type: ignore[arg-type]
