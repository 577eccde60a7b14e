"""Optimization jobs: one background job per (document, kernel), run on the engine thread.

A job is tied to the document version it was started on. It stops at the next candidate once the text
changes (or the user cancels its progress), and its result is published only if the text is still that
version: a rewrite verified for other text is never shown. Results go into the document (for hover, lens
and actions, which answer from memory), out as diagnostics, and as a `cudaAgent/result` notification.

One job runs at a time (there is one GPU worker); the others wait their turn, and the next to run is the
most urgent: a kernel the user asked for, or the one under the cursor, before the rest of a saved file.

Progress is a cancellable work-done progress where the client takes one; elsewhere it goes to the log, and
a job the user asked for ends with a message saying what it found (nothing else would say it ended).
"""

from __future__ import annotations

import asyncio
import itertools
import logging
from concurrent.futures import Future
from dataclasses import dataclass, replace
from typing import Any, Protocol

from cuda_agent.agent.llm.settings import LlmSettings
from cuda_agent.agent.targets import KernelTarget
from cuda_agent.server.backend import Backend, GpuStatus, JobProgress
from cuda_agent.server.capabilities import ClientSupport
from cuda_agent.server.documents import Document, Documents
from cuda_agent.server.feedback import SuggestionFeedback
from cuda_agent.server.rewrites import OptimizeResult
from lsprotocol import types
from pygls.progress import Progress

logger = logging.getLogger(__name__)

RESULT_NOTIFICATION = "cudaAgent/result"
STATUS_NOTIFICATION = "cudaAgent/status"  # the GPU in use, once known: {gpu, available, reason}
SEARCH_BUDGET_S = 120.0  # wall time of one kernel's search (the cudaAgent.searchBudgetSeconds setting)
URGENT, BACKGROUND = 0, 1  # job priorities: asked for or under the cursor; the rest of a saved file


class JobHost(Protocol):
    """What a job needs from the server (the server itself; a Protocol keeps this module free of app)."""

    backend: Backend
    documents: Documents
    feedback: SuggestionFeedback
    support: ClientSupport

    @property
    def work_done_progress(self) -> Progress: ...

    async def ask(self, method: str, params: Any) -> Any: ...

    def tell(self, message: str, kind: types.MessageType = types.MessageType.Info) -> None: ...

    def log(self, message: str) -> None: ...

    def publish(self, document: Document) -> None: ...

    def send_result(self, result: OptimizeResult) -> None: ...

    def refresh_lenses(self) -> None: ...


@dataclass(frozen=True)
class JobAnswer:
    started: bool
    message: str


@dataclass(eq=False)
class Job:
    version: int
    priority: int
    sequence: int  # request order, among jobs of one priority
    task: asyncio.Task[None] | None = None
    started: bool = False  # holds the GPU (or finished with it)
    stopped: bool = False  # cancelled, or its suggestion rejected: the search ends at the next candidate
    asked: bool = False  # by the user (a command), not by a save or a pause: its end is said
    searched: bool = False  # the search is over (what follows is timing the spec's PyTorch oracle)


class OptimizationJobs:
    def __init__(self, host: JobHost, budget_s: float = SEARCH_BUDGET_S) -> None:
        self._host = host
        self.budget_s = budget_s
        self.proposers: tuple[str, ...] = ()  # () = all offline proposers; "llm" runs the LLM after them
        self.llm: LlmSettings | None = None  # the LLM proposer's settings, when it runs
        self.sanitize = True  # a rewrite checked under compute-sanitizer before it is shown (the setting)
        self._jobs: dict[tuple[str, str], Job] = {}
        self._tokens = itertools.count(1)
        self._sequence = itertools.count()
        self._waiting: list[Job] = []
        self._gpu_busy = False
        self._turns = asyncio.Condition()

    async def request(
        self,
        uri: str,
        version: int,
        target: KernelTarget,
        gpu: GpuStatus,
        priority: int = URGENT,
        asked: bool = False,
    ) -> JobAnswer:
        """Start the optimization job of one kernel at one document version (once: a second request for
        the same text is answered with the job already there, moved up if this request is more urgent).
        `asked`: the user asked for it (the job's end is then said, where no progress shows it)."""
        kernel = target.kernel.name
        key = (uri, kernel)
        existing = self._jobs.get(key)
        if existing is not None and existing.task is not None and not existing.task.done():
            if existing.version == version:
                existing.asked = existing.asked or asked
                if priority < existing.priority and not existing.started:
                    existing.priority = priority
                    async with self._turns:
                        self._turns.notify_all()
                    return JobAnswer(True, f"{kernel} moved to the front of the queue")
                state = "being optimized" if existing.started else "queued"
                return JobAnswer(True, f"{kernel} is already {state} on {gpu.name}")
            existing.task.cancel()  # for older text; its engine work stops at the next candidate
        job = Job(version, priority, next(self._sequence), asked=asked)
        job.task = asyncio.ensure_future(self._queued(job, uri, target))
        self._jobs[key] = job
        job.task.add_done_callback(lambda t: self._finished(key, job, t))
        return JobAnswer(True, f"Optimizing {kernel} on {gpu.name}")

    async def _queued(self, job: Job, uri: str, target: KernelTarget) -> None:
        """Wait for the GPU, most urgent job first, then run."""
        async with self._turns:
            self._waiting.append(job)
            try:
                await self._turns.wait_for(lambda: not self._gpu_busy and self._next() is job)
            finally:
                self._waiting.remove(job)
                self._turns.notify_all()
            self._gpu_busy = job.started = True
        try:
            await self._run(job, uri, target)
        finally:
            async with self._turns:
                self._gpu_busy = False
                self._turns.notify_all()

    def _next(self) -> Job | None:
        return min(self._waiting, key=lambda j: (j.priority, j.sequence), default=None)

    def running(self, uri: str, kernel: str) -> bool:
        """Whether the kernel's search is queued or running (not the PyTorch timing after its result)."""
        job = self._jobs.get((uri, kernel))
        return job is not None and job.task is not None and not job.task.done() and not job.searched

    def cancel_all(self) -> None:
        """Called when a client session ends."""
        for job in self._jobs.values():
            if job.task is not None:
                job.task.cancel()
        self._jobs.clear()

    def cancel(self, uri: str, kernel: str) -> bool:
        """Stop the kernel's job (queued, or at its next candidate); False when it has none. What it
        found so far stays shown."""
        job = self._jobs.get((uri, kernel))
        if job is None or job.task is None or job.task.done():
            return False
        job.stopped = True
        if not job.started:
            self._drop(uri, kernel, job)
        return True

    def text_changed(self, uri: str, version: int) -> None:
        """The document's text is now `version`. Its queued jobs for older text could never be shown, so
        they go before they start (a save of a big file queues a job for every kernel, and each would
        open and close a progress bar); a running one stops at its next candidate."""
        for (job_uri, kernel), job in list(self._jobs.items()):
            if job_uri == uri and job.version != version and not job.started:
                self._drop(uri, kernel, job)

    def _drop(self, uri: str, kernel: str, job: Job) -> None:
        """Cancel a queued job and forget it now: its task is done only at the loop's next turn, and a
        request in between (a cancel, a new optimize) must already find it gone."""
        if job.task is not None:
            job.task.cancel()
        del self._jobs[(uri, kernel)]

    def reject(self, document: Document, kernel: str) -> bool:
        """Forget the kernel's suggestion and publish without it; a search still running for this text
        (the suggestion was its best so far) stops. False when there was none."""
        if document.results.pop(kernel, None) is None:
            return False
        job = self._jobs.get((document.uri, kernel))
        if job is not None and job.version == document.version:
            job.stopped = True
        self._host.feedback.decided(document.uri, kernel, "rejected")
        self._host.publish(document)
        self._host.refresh_lenses()
        return True

    def _finished(self, key: tuple[str, str], job: Job, task: asyncio.Task[None]) -> None:
        if self._jobs.get(key) is job:
            del self._jobs[key]
        if not task.cancelled() and task.exception() is not None:
            logger.error("optimization job failed", exc_info=task.exception())

    async def _run(self, job: Job, uri: str, target: KernelTarget) -> None:
        host, kernel, version = self._host, target.kernel.name, job.version
        document = host.documents.get(uri)
        if document is None or not host.documents.is_current(document, version):
            return
        token = f"cuda-agent/optimize/{next(self._tokens)}"
        progress = await _begin_progress(host, token, kernel)
        logged_best = ""

        def still_current() -> bool:
            # Read on the engine thread too: a version comparison and a future's state, no locking needed.
            cancelled = job.stopped or (progress is not None and progress.cancelled())
            return host.documents.is_current(document, version) and not cancelled

        def on_progress(p: JobProgress) -> None:
            nonlocal logged_best
            best = f"best {p.best_speedup:.2f}×" if p.best_speedup > 1.0 else "no gain yet"
            message = f"{p.kernel}: {p.done} candidates, {best}"
            percentage = min(99, round(100 * p.done / p.total)) if p.total else None
            if p.max_turns:  # the LLM proposer: "saxpy: turn 4/12, best 2.30×, est. $0.12"
                message = f"{p.kernel}: turn {p.turn}/{p.max_turns}, {best}, est. ${p.cost_usd:.2f}"
                percentage = min(99, round(100 * p.turn / p.max_turns))
            if progress is not None:
                host.work_done_progress.report(
                    token, types.WorkDoneProgressReport(message=message, percentage=percentage)
                )
            elif best != logged_best:  # in the log, a line when the best changes, not one per candidate
                logged_best = best
                host.log(message)

        def on_interim(found: OptimizeResult) -> None:
            if still_current():  # the best so far, shown at once: the search may run a minute more
                self._show(document, target, found)

        result: OptimizeResult | None = None
        try:
            result = await host.backend.optimize(
                uri, version, target, still_current, on_progress, self.budget_s, self.proposers, on_interim,
                self.llm, sanitize=self.sanitize,
            )  # fmt: skip
        finally:
            job.searched = True
            if result is not None:
                ending = result.headline()
            elif job.stopped or (progress is not None and progress.cancelled()):
                ending = f"{kernel}: stopped"
            else:
                ending = f"{kernel}: stopped, the text changed"
            if progress is not None:
                host.work_done_progress.end(token, types.WorkDoneProgressEnd(message=ending))
            elif job.asked:
                host.tell(ending)
            else:
                host.log(ending)
        if result is None or not still_current():
            logger.info("dropped the optimization of %s in %s v%s: the text changed", kernel, uri, version)
            return
        self._show(document, target, result)
        if result.rewrite is not None and target.spec is not None and target.spec.oracle:
            result = await self._with_torch(document, version, target, result)
        await host.backend.remember(document.text, result)

    def _show(self, document: Document, target: KernelTarget, result: OptimizeResult) -> None:
        """Publish a result for the document's current text (the version it was optimized for)."""
        host = self._host
        document.results[result.kernel] = result
        host.publish(document)
        host.feedback.shown(document.text, target, result)
        host.send_result(result)

    async def _with_torch(
        self, document: Document, version: int, target: KernelTarget, result: OptimizeResult
    ) -> OptimizeResult:
        """The rewrite against the spec's PyTorch oracle, eager and torch.compile: measured after the
        rewrite is shown (torch.compile takes seconds), then shown too (hover, the result notification)
        and kept with the suggestion's feedback record (RL's "faster than torch.compile" milestone)."""
        host = self._host
        eager, compiled, note = await host.backend.time_torch(target)
        timed = replace(result, torch_eager=eager, torch_compile=compiled, torch_note=note)
        if (
            not host.documents.is_current(document, version)
            or document.results.get(result.kernel) is not result
        ):
            return timed  # the text changed, or the suggestion was decided, meanwhile
        document.results[result.kernel] = timed
        host.feedback.torch_timed(result.uri, result.kernel, compiled.median_ms if compiled else None)
        host.send_result(timed)
        return timed


async def _begin_progress(host: JobHost, token: str, kernel: str) -> Future[Any] | None:
    """Create and begin a cancellable work-done progress; None where the client does not take one (it
    did not declare window.workDoneProgress, or did not answer in time): the job then logs its progress.

    Returns the token's future, which pygls cancels when the user cancels the progress."""
    if not host.support.work_done_progress:
        host.log(f"Optimizing {kernel}")
        return None
    try:
        await host.ask(
            types.WINDOW_WORK_DONE_PROGRESS_CREATE, types.WorkDoneProgressCreateParams(token=token)
        )
    except asyncio.CancelledError:
        raise
    except Exception:  # refused, or unanswered within the request timeout
        logger.info("no work-done progress for %s", kernel, exc_info=True)
        host.log(f"Optimizing {kernel}")
        return None
    progress = host.work_done_progress
    # begin() registers the token's cancellation future, which create_async would have done.
    progress.begin(
        token, types.WorkDoneProgressBegin(title=f"Optimizing {kernel}", cancellable=True, percentage=0)
    )
    return progress.tokens.get(token)
