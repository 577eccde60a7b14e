"""The language server: one instance per client session, features registered in `create_server`.

Handlers answer from memory (documents.py); anything slow (analysing a big file, compiling, the GPU)
runs off the event loop. A failing handler logs to stderr and answers empty: a language server that dies
on odd input takes the editor's features with it.

What the server does for a client is what the client declared (capabilities.py), and every request it sends
the client has a timeout (`ask`). An action the user chose (a command) is always answered where they see it
(`window/showMessage`, an Error where it could not be done: the type every client shows); work nobody asked
for says a problem once, then only logs it. Messages carry no "cuda-agent:" prefix: every client already
says which server is speaking (VS Code the extension, Neovim `LSP[cuda_agent]`, ALE the linter's name).
"""

from __future__ import annotations

import asyncio
import functools
import inspect
import logging
import uuid
from collections.abc import Awaitable, Callable, Generator
from dataclasses import replace
from pathlib import Path
from typing import Any, TypeVar
from urllib.parse import unquote

from cuda_agent.agent.feedback import REJECT_REASONS
from cuda_agent.agent.llm.settings import describe, disabled_reason
from cuda_agent.agent.llm.transcript import render_markdown
from cuda_agent.server import actions, diagnostics, hover, lenses
from cuda_agent.server.access import presented_token, token_accepted
from cuda_agent.server.backend import Backend, GpuStatus
from cuda_agent.server.capabilities import NOTHING, ClientSupport
from cuda_agent.server.documents import (
    Analysis,
    Document,
    Documents,
    current_analysis,
    restart_idle_timer,
    restart_timer,
)
from cuda_agent.server.feedback import SuggestionFeedback
from cuda_agent.server.jobs import (
    BACKGROUND,
    RESULT_NOTIFICATION,
    STATUS_NOTIFICATION,
    URGENT,
    OptimizationJobs,
)
from cuda_agent.server.positions import apply_change
from cuda_agent.server.replies import EncodedReplies
from cuda_agent.server.rewrites import OptimizeResult
from cuda_agent.server.settings import SECTION, ServerSettings, read_settings, section_of
from lsprotocol import types
from pygls.exceptions import JsonRpcServerError
from pygls.lsp.server import LanguageServer
from pygls.protocol.language_server import lsp_method
from pygls.uris import to_fs_path

from cuda_agent import __version__

logger = logging.getLogger(__name__)

T = TypeVar("T")

SHOW_TRANSCRIPT_COMMAND = "cudaAgent.showTranscript"  # [uri, kernel]: the LLM session behind a result
DEBOUNCE_S = 0.15  # after the last keystroke, before re-analysing: a burst of typing costs one parse
REQUEST_TIMEOUT_S = 5.0  # a server→client request unanswered this long is given up (and cancelled)
EDIT_TIMEOUT_S = 300.0  # workspace/applyEdit: the client may be waiting for the user to confirm the edit
SHUTDOWN_FLUSH_S = 5.0  # on shutdown, how long the reply may wait for the feedback log to take its records
ERROR = types.MessageType.Error
NO_APPLY_EDIT = (
    "this editor takes no edits from the server (workspace/applyEdit): use the code action instead, "
    "which carries the edit"
)
NO_GPU_HINT = (
    "Discovery, spec checks and compile diagnostics still work. To optimize, run the server on a machine "
    "with an NVIDIA GPU, or start `cuda-agent serve --tcp` on a GPU box and connect the editor to it."
)


_closing: set[asyncio.Future[Any]] = set()  # kept until done: asyncio holds tasks weakly


def close_writer(writer: Any) -> None:
    """Close a session's connection: a TCP stream closes at once, a websocket's close is a coroutine."""
    closing = writer.close()
    if inspect.isawaitable(closing):
        future = asyncio.ensure_future(closing)
        _closing.add(future)
        future.add_done_callback(_closing.discard)


class CudaAgentProtocol(EncodedReplies):
    """Over TCP, a client's `exit` ends its own connection, not the process that serves the next client."""

    @lsp_method(types.EXIT)
    def lsp_exit(self, *args: Any) -> Generator[Any, Any, None]:
        server = self._server
        if isinstance(server, CudaAgentServer) and server.exit_requested is not None:
            # Over stdio the session's loop leaves the process (transport.serve_stdio). pygls would raise
            # SystemExit, which its own loop swallows (the exit code was always 0), and then join threads.
            if not server.exit_requested.done():
                server.exit_requested.set_result(0 if self._shutdown else 1)
            return
        if not isinstance(server, CudaAgentServer) or not server.session_mode:
            yield from super().lsp_exit(*args)
            return
        server.end_session()
        if self.writer is not None:
            close_writer(self.writer)

    @lsp_method(types.INITIALIZE)
    def lsp_initialize(self, params: types.InitializeParams) -> Generator[Any, Any, types.InitializeResult]:
        """Positions are UTF-16 code units throughout (positions.py), the encoding every client must
        support. pygls would take the client's first choice, and Neovim asks for UTF-8 first: columns
        on a line with a non-ASCII character before them were off, in both directions."""
        general = params.capabilities.general
        if general is not None and general.position_encodings:
            general.position_encodings = [types.PositionEncodingKind.Utf16]
        return (yield from super().lsp_initialize(params))

    @lsp_method(types.TEXT_DOCUMENT_DID_CHANGE)
    def lsp_text_document__did_change(
        self, params: types.DidChangeTextDocumentParams
    ) -> Generator[Any, Any, None]:
        """pygls applies a change to lines split by `str.splitlines`, which also breaks at form feeds
        (GNU sources separate pages with them), vertical tabs and U+2028, and clamps the change's positions
        in place to those lines: an edit below a form feed landed on another line, and the server analysed
        (and would have rewritten) text the editor did not hold. Here lines end where LSP says
        (positions.apply_change), and pygls's copy takes the result whole."""
        uri = params.text_document.uri
        if unquote(uri) in self.workspace.text_documents:  # pygls keys documents by unquoted URI
            text = self.workspace.get_text_document(uri).source
            for change in params.content_changes:
                text = apply_change(text, change)
            whole = types.TextDocumentContentChangeWholeDocument(text=text)
            self.workspace.update_text_document(params.text_document, whole)
        if (handler := self.fm.features.get(types.TEXT_DOCUMENT_DID_CHANGE)) is not None:
            yield handler, (params,), None


class CudaAgentServer(LanguageServer):
    def __init__(self, backend: Backend, *, token: str | None, session_mode: bool) -> None:
        super().__init__("cuda-agent", __version__, protocol_cls=CudaAgentProtocol)
        self.backend = backend
        self.token = token  # None: no token asked (loopback only; the CLI enforces that)
        self.session_mode = session_mode  # one of many sessions of a TCP server
        self.documents = Documents()
        self.feedback = SuggestionFeedback(backend.candidates)
        self.jobs = OptimizationJobs(self)
        self.settings = ServerSettings(gpu_index=backend.gpu_index)
        self.workspace_path: Path | None = None  # where the feedback log goes
        self.refused = False
        self.gpu_message_shown = False
        self.gpu_status_sent: GpuStatus | None = None  # as last sent in cudaAgent/status
        self.llm_message = ""  # the LLM proposer's state, as last said to the user
        self.support: ClientSupport = NOTHING  # what the client declared, from `initialize`
        self._tasks: set[asyncio.Task[Any]] = set()
        self._settings_pull: asyncio.Future[None] | None = None
        # The diagnostics last published per document: the same again for the same version is not sent.
        self._published: dict[str, types.PublishDiagnosticsParams] = {}
        # Over stdio: set by the session, resolved with the exit code when the client says `exit`.
        self.exit_requested: asyncio.Future[int] | None = None

    async def apply_settings(self, raw: Any) -> None:
        """Take the client's settings (the cudaAgent section); a bad value is reported and the previous
        one kept. Applies to jobs started from now on."""
        settings, problems = read_settings(raw, self.settings)
        if problems:  # each names its setting (cudaAgent.…)
            self.tell("; ".join(problems), types.MessageType.Warning)
        self.settings = settings
        self.jobs.budget_s = settings.search_budget_s
        self.jobs.sanitize = settings.sanitize
        self._configure_llm(settings)
        self.feedback.configure(self.workspace_path, settings.feedback)
        await self.backend.use_compile_options(
            settings.include_dirs, settings.defines, settings.nvcc_flags, self.workspace_path
        )
        if settings.gpu_index != self.backend.gpu_index:
            await self.backend.use_gpu(settings.gpu_index)
            self.gpu_message_shown = False

    def _configure_llm(self, settings: ServerSettings) -> None:
        """What jobs run from now on, the LLM proposer included when asked for and usable. Its state is said
        once per change: why it is disabled (a warning: the offline search runs alone), or what runs."""
        llm = settings.llm_for_jobs()
        reason = disabled_reason(llm) if settings.llm_requested else None
        usable = settings.llm_requested and reason is None
        self.jobs.proposers = settings.job_proposers(usable)
        self.jobs.llm = llm if usable else None
        if not settings.llm_requested:
            self.llm_message = ""
            return
        message = (
            f"The LLM proposer is disabled: {reason}. The offline search runs alone."
            if reason is not None
            else f"LLM proposer: {describe(llm)}"
        )
        if message == self.llm_message:
            return
        self.llm_message = message
        if reason is not None:
            self.tell(message, types.MessageType.Warning)
        else:
            self.log(message)

    def pull_settings(self) -> None:
        """Ask the client for the cudaAgent section (workspace/configuration), unless a request for it is
        already out: the client answers that one after any change it announced meanwhile, so the answer
        has it. (Clients send didChangeConfiguration right after `initialized`: one request, not two.)"""
        if not self.support.configuration:
            return
        if self._settings_pull is None or self._settings_pull.done():
            self._settings_pull = self.spawn(self._pull_settings())

    async def _pull_settings(self) -> None:
        try:
            answer = await self.ask(
                types.WORKSPACE_CONFIGURATION,
                types.ConfigurationParams(items=[types.ConfigurationItem(section=SECTION)]),
            )
        except Exception:  # a client that says it can and then cannot, or does not answer: keep ours
            logger.warning("workspace/configuration failed", exc_info=True)
            return
        if answer:
            await self.apply_settings(answer[0])

    async def ask(self, method: str, params: Any, timeout_s: float = REQUEST_TIMEOUT_S) -> Any:
        """A request to the client; asyncio.TimeoutError when unanswered after `timeout_s`, and the client is
        told with $/cancelRequest. The wait is shielded: cancelling it never cancels pygls's own future of
        the request, whose late answer would then raise inside pygls (pygls#621)."""
        msg_id = str(uuid.uuid4())
        answer = asyncio.wrap_future(self.protocol.send_request(method, params, msg_id=msg_id))
        try:
            return await asyncio.wait_for(asyncio.shield(answer), timeout_s)
        except asyncio.TimeoutError:
            logger.warning("%s: no answer from the client in %g s", method, timeout_s)
            self.protocol.notify(types.CANCEL_REQUEST, types.CancelParams(id=msg_id))
            raise
        finally:
            if not answer.done():  # a late answer or error, taken so that asyncio does not report it
                answer.add_done_callback(lambda done: done.cancelled() or done.exception())

    def tell(self, message: str, kind: types.MessageType = types.MessageType.Info) -> None:
        """Say something the user should see now."""
        self.window_show_message(types.ShowMessageParams(type=kind, message=message))

    def log(self, message: str) -> None:
        """Record something in the client's log of this server, without interrupting the user."""
        self.window_log_message(types.LogMessageParams(type=types.MessageType.Info, message=message))

    def spawn(self, work: Awaitable[None]) -> asyncio.Future[None]:
        """Run background work, keeping a reference (asyncio holds tasks weakly) and logging failures."""
        task = asyncio.ensure_future(work)
        self._tasks.add(task)
        task.add_done_callback(self._finished)
        return task

    def _finished(self, task: asyncio.Task[Any]) -> None:
        self._tasks.discard(task)
        if not task.cancelled() and task.exception() is not None:
            logger.error("background task failed", exc_info=task.exception())

    def end_session(self) -> None:
        for task in list(self._tasks):
            task.cancel()
        self.documents.close_all()
        self.jobs.cancel_all()
        self.feedback.close()

    def publish(self, document: Document) -> None:
        """Publish the document's diagnostics if its analysis describes the text as it is now, and they are
        not what was last published for this version (a save's compile that found nothing, an interim
        result's final one: editors redraw, and some list every publish)."""
        analysis = document.analysis
        if analysis is None or not self.documents.is_current(document, analysis.version):
            return
        params = diagnostics.publish_params(document, analysis)
        if self._published.get(document.uri) == params:
            return
        self._published[document.uri] = params
        self.text_document_publish_diagnostics(params)

    def forget_published(self, uri: str) -> None:
        """The client dropped the document's diagnostics (closed, or opened anew): the next are sent."""
        self._published.pop(uri, None)

    def send_result(self, result: OptimizeResult) -> None:
        """The full result, for clients that show more than diagnostics (the VS Code extension); the
        kernel's lens changes with it."""
        self.protocol.notify(RESULT_NOTIFICATION, result.to_json())
        self.refresh_lenses()

    def refresh_lenses(self) -> None:
        """Ask the client to fetch the code lenses again (they changed without an edit), where it can."""
        if self.support.lens_refresh:
            self.spawn(self._refresh_lenses())

    async def _refresh_lenses(self) -> None:
        try:
            await self.ask(types.WORKSPACE_CODE_LENS_REFRESH, None)
        except Exception:  # unanswered or refused: the lenses update at the next edit
            logger.info("workspace/codeLens/refresh failed", exc_info=True)


def guarded(default: Callable[[], T]) -> Callable[[Callable[..., Awaitable[T]]], Callable[..., Awaitable[T]]]:
    """Never let a handler's failure reach the client as a crash: log it, answer `default()`."""

    def wrap(handler: Callable[..., Awaitable[T]]) -> Callable[..., Awaitable[T]]:
        @functools.wraps(handler)
        async def run(ls: CudaAgentServer, *args: Any) -> T:
            if ls.refused:
                return default()
            try:
                return await handler(ls, *args)
            except asyncio.CancelledError:
                raise
            except Exception:
                logger.exception("%s failed", handler.__name__)
                return default()

        return run

    return wrap


def create_server(
    backend: Backend, *, token: str | None = None, session_mode: bool = False
) -> CudaAgentServer:
    server = CudaAgentServer(backend, token=token, session_mode=session_mode)

    @server.feature(types.INITIALIZE)
    async def initialize(ls: CudaAgentServer, params: types.InitializeParams) -> None:
        if token_accepted(ls.token, presented_token(params.initialization_options)):
            ls.support = ClientSupport.of(params.capabilities)
            ls.workspace_path = _workspace(params)
            # initializationOptions carry the same settings, for clients without workspace/configuration.
            await ls.apply_settings(params.initialization_options)
            return
        ls.refused = True
        writer = ls.protocol.writer
        if writer is not None and ls.session_mode:
            # After the error response is written: a refused client gets nothing more from this socket.
            asyncio.get_running_loop().call_later(0.2, close_writer, writer)
        raise JsonRpcServerError(
            'This server needs a token: set initializationOptions {"token": "..."} to the '
            "value it was started with (--token or CUDA_AGENT_TOKEN)",
            code=-32001,
            data={"retry": False},
        )

    @server.feature(types.INITIALIZED)
    @guarded(lambda: None)
    async def initialized(ls: CudaAgentServer, params: types.InitializedParams) -> None:
        ls.pull_settings()

    @server.feature(types.WORKSPACE_DID_CHANGE_CONFIGURATION)
    @guarded(lambda: None)
    async def did_change_configuration(
        ls: CudaAgentServer, params: types.DidChangeConfigurationParams
    ) -> None:
        if ls.support.configuration:
            ls.pull_settings()  # VS Code sends an empty payload: the settings are to be asked for
        else:
            await ls.apply_settings(section_of(params.settings))

    @server.feature(types.SHUTDOWN)
    async def shutdown(ls: CudaAgentServer, params: None) -> None:
        # Stops compiles at their next kernel, so `exit` does not wait for a long save to finish.
        ls.end_session()
        # The feedback log is written before the reply: clients may kill the server as soon as they have
        # sent `exit` (Emacs's jsonrpc deletes the process at once), before it flushes on leaving.
        await asyncio.to_thread(ls.feedback.flush, SHUTDOWN_FLUSH_S)

    @server.feature(types.TEXT_DOCUMENT_DID_OPEN)
    @guarded(lambda: None)
    async def did_open(ls: CudaAgentServer, params: types.DidOpenTextDocumentParams) -> None:
        item = params.text_document
        document = ls.documents.open(item.uri, item.version, item.text)
        ls.forget_published(item.uri)
        ls.spawn(_analyse_and_publish(ls, document, delay_s=0.0, recall=True))

    @server.feature(types.TEXT_DOCUMENT_DID_CHANGE)
    @guarded(lambda: None)
    async def did_change(ls: CudaAgentServer, params: types.DidChangeTextDocumentParams) -> None:
        text = ls.workspace.get_text_document(params.text_document.uri)  # the protocol applied the changes
        document = ls.documents.change(text.uri, params.text_document.version, text.source)
        ls.feedback.text_changed(document.uri, document.version, document.text)
        ls.jobs.text_changed(document.uri, document.version)
        restart_timer(document, _analyse_and_publish(ls, document, delay_s=DEBOUNCE_S))
        idle = ls.settings.trigger == "idle"
        restart_idle_timer(document, _optimize_when_idle(ls, document, document.version) if idle else None)

    @server.feature(types.TEXT_DOCUMENT_DID_SAVE)
    @guarded(lambda: None)
    async def did_save(ls: CudaAgentServer, params: types.DidSaveTextDocumentParams) -> None:
        document = ls.documents.get(params.text_document.uri)
        if document is not None:
            ls.spawn(_compile_and_publish(ls, document, optimize=ls.settings.trigger == "save"))

    @server.feature(types.TEXT_DOCUMENT_DID_CLOSE)
    @guarded(lambda: None)
    async def did_close(ls: CudaAgentServer, params: types.DidCloseTextDocumentParams) -> None:
        ls.documents.close(params.text_document.uri)
        ls.forget_published(params.text_document.uri)
        ls.text_document_publish_diagnostics(
            types.PublishDiagnosticsParams(uri=params.text_document.uri, diagnostics=[])
        )

    @server.feature(types.TEXT_DOCUMENT_CODE_LENS)
    @guarded(list)
    async def code_lens(ls: CudaAgentServer, params: types.CodeLensParams) -> list[types.CodeLens]:
        document = ls.documents.get(params.text_document.uri)
        if document is None:
            return []
        return lenses.code_lenses(await current_analysis(document), document)

    @server.feature(types.TEXT_DOCUMENT_HOVER)
    @guarded(lambda: None)
    async def on_hover(ls: CudaAgentServer, params: types.HoverParams) -> types.Hover | None:
        document = ls.documents.get(params.text_document.uri)
        if document is None:
            return None
        document.cursor = (params.position.line, params.position.character)
        analysis = await current_analysis(document)
        fresh = document.current_compile() is not None
        results = {r.kernel: r for r in document.current_results()}
        markdown = ls.support.hover_markdown
        return hover.hover(analysis, params.position, document.resources, fresh, results, markdown)

    @server.feature(
        types.TEXT_DOCUMENT_CODE_ACTION,
        types.CodeActionOptions(code_action_kinds=actions.KINDS, resolve_provider=True),
    )
    @guarded(list)
    async def code_action(
        ls: CudaAgentServer, params: types.CodeActionParams
    ) -> list[types.CodeAction | types.Command]:
        document = ls.documents.get(params.text_document.uri)
        if document is None:
            return []
        document.cursor = (params.range.start.line, params.range.start.character)
        analysis = await current_analysis(document)
        searching = functools.partial(ls.jobs.running, document.uri)
        return actions.code_actions(analysis, document, params, ls.support, searching)

    @server.feature(types.CODE_ACTION_RESOLVE)
    async def resolve_code_action(ls: CudaAgentServer, action: types.CodeAction) -> types.CodeAction:
        try:
            # Resolving is not accepting (editors also resolve to preview): the feedback log counts the
            # rewrite as accepted when the document's text becomes it.
            return actions.resolve_code_action(action, ls.documents, ls.support)
        except Exception:  # answered unresolved rather than as an error
            logger.exception("resolving %r failed", action.title)
            return action

    @server.command(lenses.APPLY_COMMAND)
    @guarded(lambda: None)
    async def apply_rewrite(ls: CudaAgentServer, *arguments: Any) -> dict[str, Any] | None:
        """The lens's "Apply": the same edit the resolved code action carries, sent as workspace/applyEdit
        (where the client takes it; else the answer carries the edit, and says to use the code action)."""
        result = _command_result(ls, arguments)
        document = ls.documents.get(result.uri) if result is not None else None
        if result is None or document is None or result.rewrite is None:
            return _refused(ls, {"applied": False}, "No verified rewrite for this text: nothing was applied")
        edit = actions.rewrite_edit(document, result, ls.support.document_changes)
        label = f"Apply verified rewrite of {result.kernel}"
        answer = await _apply_edit(ls, edit, label)
        if answer is None:
            return {"applied": False, "reason": NO_APPLY_EDIT, "edit": edit}
        # Applied is not accepted: VS Code's refactor preview applies what the user left ticked, which may be
        # part of the edit. The feedback log counts it accepted when the document's text becomes the rewrite.
        # Declined without a reason: the user's own choice, in the client.
        if not answer.applied and answer.failure_reason:
            ls.tell(f"The rewrite of {result.kernel} was not applied: {answer.failure_reason}", ERROR)
        return {"applied": answer.applied, "reason": answer.failure_reason or ""}

    @server.command(lenses.REJECT_COMMAND)
    @guarded(lambda: None)
    async def reject_rewrite(ls: CudaAgentServer, *arguments: Any) -> dict[str, Any] | None:
        """Arguments [uri, kernel] or [uri, kernel, reason]: the reason one of REJECT_REASONS."""
        reason = arguments[2] if len(arguments) > 2 and arguments[2] not in (None, "") else None  # skipped
        if reason is not None and reason not in REJECT_REASONS:
            known = ", ".join(f'"{r}"' for r in REJECT_REASONS)
            message = f"Not rejected: the reason {reason!r} is none of {known}"
            return _refused(ls, {"rejected": False}, message)
        result = _command_result(ls, arguments)
        document = ls.documents.get(result.uri) if result is not None else None
        if result is None or document is None:
            ls.tell("No suggestion to reject here")
            return {"rejected": False}
        # Recorded with its reason first: the reject below then finds the suggestion decided.
        ls.feedback.decided(result.uri, result.kernel, "rejected", reason)
        ls.jobs.reject(document, result.kernel)
        ls.tell(f"Rejected the suggested rewrite of {result.kernel}" + (f" ({reason})" if reason else ""))
        return {"rejected": True}

    @server.command(lenses.CANCEL_COMMAND)
    @guarded(lambda: None)
    async def cancel_optimization(ls: CudaAgentServer, *arguments: Any) -> dict[str, Any] | None:
        """Stop a kernel's search (as cancelling its progress does): arguments [uri, kernel]."""
        if len(arguments) < 2 or not all(isinstance(a, str) for a in arguments[:2]):
            return _refused(
                ls, {"cancelled": False}, "Cancel optimization: expected the arguments [uri, kernel]"
            )
        uri, kernel = arguments[0], arguments[1]
        cancelled = ls.jobs.cancel(uri, kernel)
        ls.tell(f"Stopping the optimization of {kernel}" if cancelled else f"{kernel} is not being optimized")
        return {"cancelled": cancelled}

    @server.command(SHOW_TRANSCRIPT_COMMAND)
    @guarded(lambda: None)
    async def show_transcript(ls: CudaAgentServer, *arguments: Any) -> dict[str, Any] | None:
        """The LLM proposer's conversation behind a kernel's current result: arguments [uri, kernel]."""
        result = _command_result(ls, arguments)
        if result is None or not result.transcript:
            return {"found": False, "reason": "no LLM session behind this kernel's current result"}
        proposer = result.rewrite.proposer if result.rewrite is not None else ""
        title = f"{result.kernel}: {result.llm or 'LLM session'}"
        return {
            "found": True,
            "kernel": result.kernel,
            "proposer": proposer,
            "summary": result.llm,
            "markdown": render_markdown(result.transcript, title),
            "turns": list(result.transcript),
        }

    @server.command(lenses.ADD_SPEC_COMMAND)
    @guarded(lambda: None)
    async def add_spec(ls: CudaAgentServer, *arguments: Any) -> dict[str, Any] | None:
        found = await _command_target(ls, arguments)
        analysis = await current_analysis(found[0]) if found is not None else None
        edit = None
        if found is not None and analysis is not None:
            edit = actions.add_spec_edit(analysis, found[0].uri, found[1], ls.support.document_changes)
        if edit is None:
            return _refused(
                ls, {"applied": False}, "No spec to add: the kernel has one, or none can be inferred"
            )
        answer = await _apply_edit(ls, edit, actions.ADD_SPEC_TITLE)
        if answer is None:
            return {"applied": False, "reason": NO_APPLY_EDIT, "edit": edit}
        return {"applied": answer.applied, "reason": answer.failure_reason or ""}

    @server.command(lenses.OPTIMIZE_COMMAND)
    @guarded(lambda: None)
    async def optimize(ls: CudaAgentServer, *arguments: Any) -> dict[str, Any] | None:
        found = await _command_target(ls, arguments)
        if found is None:
            name = arguments[1] if len(arguments) > 1 else "?"
            answer = {"started": False, "reason": "no such kernel in an open document"}
            return _refused(ls, answer, f"Not optimized: no kernel {name!r} in an open document")
        document, target = found
        gpu = await _gpu_or_say_why(ls, asked=True)
        if gpu is None:
            return {"started": False, "reason": "no GPU"}
        answer = await ls.jobs.request(document.uri, document.version, target, gpu, URGENT, asked=True)
        ls.tell(answer.message)
        return {"started": answer.started, "reason": answer.message}

    return server


def _workspace(params: types.InitializeParams) -> Path | None:
    """The first workspace folder (where the feedback log lives), or None for loose files."""
    uri = params.workspace_folders[0].uri if params.workspace_folders else params.root_uri
    path = to_fs_path(uri) if uri else params.root_path
    return Path(path) if path else None


def _refused(ls: CudaAgentServer, answer: dict[str, Any], message: str) -> dict[str, Any]:
    """A command that could not do what was asked: said to the user, and answered with the reason (the
    answer's own, where it has one)."""
    ls.tell(message, ERROR)
    return {"reason": message, **answer}


async def _apply_edit(
    ls: CudaAgentServer, edit: types.WorkspaceEdit, label: str
) -> types.ApplyWorkspaceEditResult | None:
    """workspace/applyEdit, where the client takes it (None where it does not: the user is told)."""
    if not ls.support.apply_edit:
        ls.tell(f"{label}: {NO_APPLY_EDIT}", ERROR)
        return None
    try:
        return await ls.ask(
            types.WORKSPACE_APPLY_EDIT, types.ApplyWorkspaceEditParams(edit=edit, label=label), EDIT_TIMEOUT_S
        )
    except asyncio.TimeoutError:
        return types.ApplyWorkspaceEditResult(applied=False, failure_reason="the editor did not answer")


def _command_result(ls: CudaAgentServer, arguments: tuple[Any, ...]) -> OptimizeResult | None:
    """The current optimization result named by a command's [uri, kernel name] arguments."""
    if len(arguments) < 2 or not isinstance(arguments[0], str) or not isinstance(arguments[1], str):
        logger.warning("command arguments should be [uri, kernel name], got %r", arguments)
        return None
    document = ls.documents.get(arguments[0])
    return document.current_result(arguments[1]) if document is not None else None


async def _command_target(ls: CudaAgentServer, arguments: tuple[Any, ...]) -> tuple[Document, Any] | None:
    """(document, kernel target) from a command's [uri, kernel name] arguments, as the lenses send them."""
    if len(arguments) < 2 or not isinstance(arguments[0], str) or not isinstance(arguments[1], str):
        logger.warning("command arguments should be [uri, kernel name], got %r", arguments)
        return None
    document = ls.documents.get(arguments[0])
    if document is None:
        return None
    target = (await current_analysis(document)).target_named(arguments[1])
    return (document, target) if target is not None else None


async def _gpu_or_say_why(ls: CudaAgentServer, asked: bool = False) -> GpuStatus | None:
    """The GPU status when there is one; else None, after telling the user: every time they `asked`,
    else (a save, a pause) once per session, later attempts only logging it."""
    gpu = await ls.backend.gpu_status()
    if gpu != ls.gpu_status_sent:  # the GPU in use, for clients that show it before any result
        ls.gpu_status_sent = gpu
        ls.protocol.notify(
            STATUS_NOTIFICATION, {"gpu": gpu.name, "available": gpu.available, "reason": gpu.reason}
        )
    if gpu.available:
        return gpu
    message = f"Optimizing needs an NVIDIA GPU, and there is none here ({gpu.reason}). {NO_GPU_HINT}"
    if asked:
        ls.tell(message, ERROR)
    elif not ls.gpu_message_shown:
        ls.tell(message, types.MessageType.Warning)
    else:
        ls.log(message)
    ls.gpu_message_shown = True
    return None


async def _optimize_file(ls: CudaAgentServer, document: Document, analysis: Analysis) -> None:
    """Queue a job for every kernel of the text with a written spec, and for the kernel under the cursor
    (its spec may be inferred), that one first; kernels already optimized for this text are left alone.
    Kernels with only an inferred spec wait to be asked: a big file would otherwise queue hours of search."""
    at_cursor = _kernel_at_cursor(document, analysis)
    targets = [
        t for t in analysis.targets.targets
        if t.spec is not None and (not t.spec.inferred or t.kernel.name == at_cursor)
        and document.current_result(t.kernel.name) is None
    ]  # fmt: skip
    if not targets or not ls.documents.is_current(document, analysis.version):
        return
    gpu = await _gpu_or_say_why(ls)
    if gpu is None:
        return
    for target in sorted(targets, key=lambda t: t.kernel.name != at_cursor):
        priority = URGENT if target.kernel.name == at_cursor else BACKGROUND
        await ls.jobs.request(document.uri, analysis.version, target, gpu, priority)


def _kernel_at_cursor(document: Document, analysis: Analysis) -> str | None:
    if document.cursor is None:
        return None
    line = document.cursor[0]
    spans = [(t.kernel.name, t.kernel.span) for t in analysis.targets.targets]
    return next((name for name, span in spans if span.start_line <= line <= span.end_line), None)


async def _optimize_when_idle(ls: CudaAgentServer, document: Document, version: int) -> None:
    await asyncio.sleep(ls.settings.idle_seconds)
    if ls.documents.is_current(document, version) and ls.settings.trigger == "idle":
        await _optimize_file(ls, document, await current_analysis(document))


async def _analyse_and_publish(
    ls: CudaAgentServer, document: Document, delay_s: float, recall: bool = False
) -> None:
    """Publish the diagnostics of the current text; with `recall` (a file just opened), also the results
    last found for exactly this text, so a reopened file shows its verified rewrites at once."""
    if delay_s:
        await asyncio.sleep(delay_s)
    analysis = await current_analysis(document)
    if recall:
        kernels = [t.kernel.name for t in analysis.targets.targets if t.spec is not None]
        for kept in await ls.backend.recall(document.text, kernels):
            target = analysis.target_named(kept.kernel)
            if target is not None and ls.documents.is_current(document, analysis.version):
                result = replace(kept, uri=document.uri, version=analysis.version)
                document.results[result.kernel] = result
                ls.feedback.shown(document.text, target, result)  # shown again: a new suggestion to decide
                ls.send_result(result)  # the extension's candidates view and status bar show it too
    ls.publish(document)


async def _compile_and_publish(ls: CudaAgentServer, document: Document, optimize: bool) -> None:
    """Compile the saved text off the event loop; a result for text that has changed since is dropped.
    With `optimize` (the save trigger), the kernels that compiled are then queued for optimization."""
    analysis = await current_analysis(document)
    version = analysis.version
    ls.publish(document)  # the cheap diagnostics at once, in case a debounce was still pending
    result = await ls.backend.compile_file(
        analysis.targets, lambda: ls.documents.is_current(document, version)
    )
    if not result.complete or not ls.documents.is_current(document, version):
        logger.info("dropped the compile of %s version %s: the text changed", document.uri, version)
        return
    document.compiled, document.compiled_version = result, version
    document.resources.update(result.resources)
    ls.publish(document)
    if optimize and not any(p.severity == "error" for p in result.problems):
        await _optimize_file(ls, document, analysis)
