"""The engine behind the server: compiling and asking for the GPU, off the event loop.

One Backend serves every session of a process (a TCP server serves clients one after another, and the
GPU worker should outlive a client). The Engine is not thread-safe (its device probe starts the worker
process), so it lives on one dedicated thread and every call goes through that thread's queue.
Results cross into the server as the plain dataclasses below, so no server module touches sandbox types.
"""

from __future__ import annotations

import asyncio
import hashlib
import logging
import os
import threading
from collections.abc import Callable, Sequence
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, replace
from datetime import datetime, timezone
from pathlib import Path
from typing import Any, Literal, TypeVar

from cuda_agent.agent.cache import ResultCache, result_key
from cuda_agent.agent.candidate_log import CandidateLog
from cuda_agent.agent.candidates import OF_THE_REWRITE
from cuda_agent.agent.engine import Engine, EngineSettings, Progress
from cuda_agent.agent.executors import PoolSettings
from cuda_agent.agent.llm.settings import LlmSettings
from cuda_agent.agent.optimize import OptimizeOutcome, optimize
from cuda_agent.agent.targets import FileTargets, KernelTarget
from cuda_agent.sandbox.protocol import TorchTimingResult
from cuda_agent.server.rewrites import CandidateRow, MeasuredTime, OptimizeResult, Rewrite

logger = logging.getLogger(__name__)

T = TypeVar("T")


def _digest(text: str) -> str:
    return hashlib.sha256(text.encode("utf-8", "surrogatepass")).hexdigest()


Severity = Literal["error", "warning", "note"]

# Each kernel is a separate NVRTC run (~0.1 s); a file of hundreds of kernels gets resources for its
# first ones rather than a save that keeps the compiler busy for a minute.
MAX_KERNELS_PER_SAVE = 24


@dataclass(frozen=True)
class CompileProblem:
    """A compiler diagnostic: 1-based line and character column as the compiler prints them."""

    severity: Severity
    message: str
    line: int | None
    column: int | None
    file: str | None
    backend: str


@dataclass(frozen=True)
class KernelResources:
    """What ptxas reports for one compiled kernel."""

    registers: int | None
    shared_bytes: int | None
    spill_bytes: int | None
    backend: str
    arch: str


@dataclass(frozen=True)
class FileCompile:
    problems: tuple[CompileProblem, ...]
    resources: dict[str, KernelResources]  # kernel name → resources, for the kernels that compiled
    complete: bool  # False when it stopped early because the text changed


@dataclass(frozen=True)
class JobProgress:
    """A snapshot of a running job, for `window/workDoneProgress`."""

    kernel: str
    done: int
    total: int
    best_speedup: float
    turn: int = 0  # the LLM proposer's turn, while it runs (of max_turns)
    max_turns: int = 0
    cost_usd: float = 0.0  # its estimated cost so far


class JobCancelled(Exception):
    """Raised on the engine thread between candidates when the job's text is no longer current."""


@dataclass(frozen=True)
class GpuStatus:
    available: bool
    name: str | None
    reason: str  # why there is none, from the engine


# NVRTC compiles in-process, on the engine thread, and recurses on the program's nesting: 10,000 nested
# loops overflowed a thread's default 8 MiB stack and the server died (SIGSEGV) on save. Address space,
# not memory: only the pages a compile touches are used.
ENGINE_STACK_BYTES = 512 * 1024 * 1024


def _big_stack_threads(count: int, name: str) -> ThreadPoolExecutor:
    """`count` threads, all started now with ENGINE_STACK_BYTES of stack (threads made later get the
    default again): each waits at a barrier until the last has started, so the executor makes them all."""
    executor = ThreadPoolExecutor(max_workers=count, thread_name_prefix=name)
    previous = threading.stack_size(ENGINE_STACK_BYTES)
    try:
        started = threading.Barrier(count)
        for future in [executor.submit(started.wait) for _ in range(count)]:
            future.result()
    finally:
        threading.stack_size(previous)
    return executor


class Backend:
    """The engine for every session of the process. Compiles and the GPU probe run on one engine thread;
    searches on threads of their own, as many at once as the executor has GPUs (one with one GPU): with a
    pool, several editors' searches run side by side, their requests taking the pool's workers in turn,
    and a compile for diagnostics never waits behind a search."""

    def __init__(self, settings: EngineSettings | None = None, pool: PoolSettings | None = None) -> None:
        self._settings = settings or EngineSettings()
        self._pool = pool or PoolSettings()
        self._engine: Engine | None = None  # created on the engine thread, on first use
        # This Backend's own candidate log, not the process's: each session served routes its workspace's
        # samples to that workspace's log (server/feedback.py), and another Backend never sees them.
        self.candidates = CandidateLog()
        self._thread = _big_stack_threads(1, "cuda-agent-engine")
        self._searches: ThreadPoolExecutor | None = None  # made at the first search: sized by the pool
        self._running: set[asyncio.Future[Any]] = set()
        self._gpu: GpuStatus | None = None
        self._gpu_lock = asyncio.Lock()
        self._shown: ResultCache | None = None  # the editor's last result per (file text, kernel)

    async def _run(self, work: Callable[[], T]) -> T:
        return await asyncio.get_running_loop().run_in_executor(self._thread, work)

    async def _search(self, work: Callable[[], T]) -> T:
        if self._searches is None:
            workers = await self._run(lambda: self._get_engine().executor.workers)
            self._searches = _big_stack_threads(max(1, workers), "cuda-agent-search")
        future = asyncio.get_running_loop().run_in_executor(self._searches, work)
        self._running.add(future)
        try:
            return await future
        finally:
            self._running.discard(future)

    def _get_engine(self) -> Engine:
        if self._engine is None:
            self._engine = Engine(self._settings, pool=self._pool, recorder=self.candidates)
        return self._engine

    # -- the GPU ---------------------------------------------------------------------------------------

    @property
    def gpu_index(self) -> int:
        return self._settings.gpu_index

    async def use_gpu(self, index: int) -> None:
        """Switch to another GPU (the cudaAgent.gpuIndex setting): the engine and its worker are closed
        on the engine thread, after the work queued there, and the next request starts them anew."""
        if index == self._settings.gpu_index:
            return
        async with self._gpu_lock:
            self._settings = replace(self._settings, gpu_index=index)
            self._gpu = None

            def close_engine() -> None:
                if self._engine is not None:
                    self._engine.close()
                    self._engine = None

            # Searches use the engine from their own threads: they end first (at their budget).
            await asyncio.gather(*self._running, return_exceptions=True)
            await self._run(close_engine)

    async def use_compile_options(
        self,
        include_dirs: Sequence[str],
        defines: Sequence[str],
        nvcc_flags: Sequence[str],
        base: Path | None,
    ) -> None:
        """The cudaAgent.includeDirs/defines/nvccFlags settings, for compiles from now on; relative folders
        are `base`'s (the workspace folder), else the server's current directory, and `~` and
        `${workspaceFolder}` are read as VS Code users write them. Set on the engine thread, between
        compiles, so that no compile sees half of them."""
        root = str(base or os.getcwd())
        folders = tuple(
            os.path.normpath(os.path.join(root, os.path.expanduser(d.replace("${workspaceFolder}", root))))
            for d in include_dirs
        )
        settings = replace(
            self._settings, include_dirs=folders, defines=tuple(defines), nvcc_flags=tuple(nvcc_flags)
        )
        if settings == self._settings:
            return

        def apply() -> None:
            self._settings = settings
            if self._engine is not None:
                self._engine.settings = replace(
                    self._engine.settings, include_dirs=folders, defines=settings.defines,
                    nvcc_flags=settings.nvcc_flags,
                )  # fmt: skip

        await self._run(apply)

    async def gpu_status(self) -> GpuStatus:
        """Asked once per process: the probe starts the worker, which costs a process spawn."""
        async with self._gpu_lock:
            if self._gpu is None:
                self._gpu = await self._run(self._probe_gpu)
            return self._gpu

    def _probe_gpu(self) -> GpuStatus:
        try:
            engine = self._get_engine()
            device = engine.device()
            gpu = engine.gpu
        except Exception as exc:  # a broken CUDA install must not take the server down
            logger.exception("GPU probe failed")
            return GpuStatus(False, None, f"the GPU probe failed: {exc}")
        if gpu is not None:
            return GpuStatus(True, gpu.name, "")
        return GpuStatus(False, None, str(getattr(device, "message", "no GPU found")))

    # -- compiling -------------------------------------------------------------------------------------

    async def compile_file(self, targets: FileTargets, still_current: Callable[[], bool]) -> FileCompile:
        return await self._run(lambda: self._compile_file(targets, still_current))

    def _compile_file(self, targets: FileTargets, still_current: Callable[[], bool]) -> FileCompile:
        """Compile the kernels that can be named (a template needs its spec's `instantiate`), one NVRTC run
        each for their resources. The errors of a broken file come back from every run, so the first
        failing run ends the loop; warnings repeated by several runs are merged."""
        engine = self._get_engine()
        problems: dict[tuple[object, ...], CompileProblem] = {}
        resources: dict[str, KernelResources] = {}
        for target in [t for t in targets.targets if t.compilable][:MAX_KERNELS_PER_SAVE]:
            if not still_current():
                return FileCompile(tuple(problems.values()), resources, complete=False)
            try:
                result = engine.compile(target, targets.source)
            except Exception as exc:  # the compiler wrapper failing is a problem to show, not a crash
                logger.exception("compiling %s failed", target.kernel.name)
                problem = CompileProblem("error", f"could not run the compiler: {exc}", None, None, None, "")
                problems.setdefault((problem.message,), problem)
                continue
            for d in result.diagnostics:
                problem = CompileProblem(d.severity, d.message, d.line, d.column, d.file, result.backend)
                problems.setdefault((d.severity, d.message, d.line, d.column, d.file), problem)
            if result.kernel is not None:
                usage = result.kernel.resources
                resources[target.kernel.name] = KernelResources(
                    usage.registers, usage.shared_bytes, usage.spilled_bytes or 0, result.backend,
                    result.kernel.arch,
                )  # fmt: skip
            elif result.errors:
                break  # the whole file failed: every other kernel's compile would repeat these errors
        return FileCompile(tuple(problems.values()), resources, complete=True)

    # -- results kept for reopened files ---------------------------------------------------------------

    def _results(self) -> ResultCache:
        if self._shown is None:
            self._shown = ResultCache(enabled=self._settings.use_cache)
        return self._shown

    def _key(self, text_digest: str, kernel: str) -> str:
        return result_key("editor-result", text_digest, kernel, self._settings.gpu_index)

    async def remember(self, text: str, result: OptimizeResult) -> None:
        """Keep a job's result for this exact file text, so reopening the file shows it at once."""
        digest = _digest(text)
        await asyncio.to_thread(lambda: self._results().set(self._key(digest, result.kernel), result))

    async def recall(self, text: str, kernels: list[str]) -> list[OptimizeResult]:
        """The kept results of these kernels for exactly this text (on this GPU index). The text is
        hashed once for all of them: once per kernel made opening a file of 3,000 kernels take 5 s."""

        def look_up() -> list[OptimizeResult]:
            digest = _digest(text)
            found = [self._results().get(self._key(digest, kernel)) for kernel in kernels]
            return [r for r in found if isinstance(r, OptimizeResult)]

        return await asyncio.to_thread(look_up)

    # -- optimizing ------------------------------------------------------------------------------------

    async def optimize(
        self,
        uri: str,
        version: int,
        target: KernelTarget,
        still_current: Callable[[], bool],
        on_progress: Callable[[JobProgress], None],
        budget_s: float,
        proposers: tuple[str, ...] = (),
        on_interim: Callable[[OptimizeResult], None] | None = None,
        llm: LlmSettings | None = None,
        sanitize: bool = False,
    ) -> OptimizeResult | None:
        """Optimize one kernel on the engine thread; None when the text changed before it finished.
        With `sanitize`, every rewrite is checked under compute-sanitizer before it is published, the best
        so far included (a rejected one gives way to the next best: agent/sanitizer_gate.py).

        `still_current` is read on the engine thread after every candidate (a plain version comparison),
        so an edit stops the search within one candidate. `on_progress`, and `on_interim` with the best
        rewrite so far each time the search finds a better one (`searching` set), are called on the event
        loop."""
        loop = asyncio.get_running_loop()
        gpu_name = ""

        def progress(p: Progress) -> None:
            if not still_current():
                raise JobCancelled
            snapshot = JobProgress(p.kernel, p.done, p.total, p.best_speedup, p.turn, p.max_turns, p.cost_usd)
            loop.call_soon_threadsafe(on_progress, snapshot)

        def interim(outcome: OptimizeOutcome) -> None:
            if on_interim is not None and still_current():
                found = replace(_result(uri, version, outcome, gpu_name), searching=True)
                loop.call_soon_threadsafe(on_interim, found)

        def work() -> OptimizeResult | None:
            nonlocal gpu_name
            if not still_current():
                return None
            engine = self._get_engine()
            gpu = engine.gpu
            gpu_name = gpu.name if gpu else "no GPU"
            try:
                outcome = optimize(
                    engine, target, proposers or None, on_progress=progress, budget_s=budget_s,
                    on_best=interim, llm=llm, sanitize=sanitize,
                )  # fmt: skip
            except JobCancelled:
                return None
            for rejected in (r for r in outcome.results if r.sanitizer_rejected):
                logger.info("%s: %s", rejected.candidate.description, rejected.reason)
            return _result(uri, version, outcome, gpu_name)

        return await self._search(work)

    async def time_torch(self, target: KernelTarget) -> tuple[MeasuredTime | None, MeasuredTime | None, str]:
        """The spec's oracle timed eager and through torch.compile (cached by the engine); (None, None,
        why) where there is none or it failed. Seconds on first use (torch.compile compiles), so jobs ask
        after their result is already shown."""

        def work() -> tuple[MeasuredTime | None, MeasuredTime | None, str]:
            engine = self._get_engine()
            timed = engine.time_torch(engine.baseline(target))  # the baseline is cached by the search
            if not isinstance(timed, TorchTimingResult):
                return None, None, timed.message
            eager = _time(timed.eager) if timed.eager is not None else None
            compiled = _time(timed.compiled) if timed.compiled is not None else None
            return eager, compiled, timed.note

        return await self._run(work)

    def close(self) -> None:
        if self._shown is not None:
            self._shown.close()

        def close_engine() -> None:
            if self._engine is not None:
                self._engine.close()

        try:
            self._thread.submit(close_engine).result(timeout=10)
        except Exception:
            logger.exception("closing the engine failed")
        self._thread.shutdown(wait=False, cancel_futures=True)
        if self._searches is not None:
            self._searches.shutdown(wait=False, cancel_futures=True)

    def abort(self) -> None:
        """Stop at once, for a process that is leaving (the client said `exit`): the GPU worker and the
        compilers still running are killed, from this thread; queued work is dropped. `close` instead
        waits behind the engine thread's current step, which a huge file's compile makes minutes long."""
        engine = self._engine
        if engine is not None:
            engine.kill()
        self._thread.shutdown(wait=False, cancel_futures=True)
        if self._searches is not None:
            self._searches.shutdown(wait=False, cancel_futures=True)


def _time(report: Any) -> MeasuredTime:
    return MeasuredTime(
        report.median_ms, report.p10_ms, report.p90_ms, report.runs, report.bandwidth_gbs,
        report.roofline_fraction,
    )  # fmt: skip


def _result(uri: str, version: int, outcome: OptimizeOutcome, gpu: str) -> OptimizeResult:
    """The engine's outcome as the server's plain data (no sandbox type crosses into the server)."""
    baseline, best = outcome.baseline, outcome.best
    rewrite = None
    if best is not None and best.comparison is not None:
        c = best.comparison
        rewrite = Rewrite(
            candidate_id=best.candidate.id,
            description=best.candidate.description,
            proposer=best.candidate.proposer,
            source=best.candidate.source,
            assumptions=best.candidate.assumptions,
            speedup=c.speedup,
            original=_time(c.baseline),
            best=_time(c.candidate),
            decision=c.decision,
            flags=best.candidate.flags,
            ratio_ci=c.ratio_ci,
            sanitizer=best.sanitizer.summary(OF_THE_REWRITE) if best.sanitizer is not None else "",
            notes=best.candidate.notes,
        )
    verification = best.verification if best is not None else baseline.verification
    rows = tuple(
        CandidateRow(
            r.candidate.id, r.candidate.description, r.candidate.proposer, r.status, r.speedup, r.reason
        )
        for r in outcome.results
    )
    return OptimizeResult(
        uri=uri,
        version=version,
        kernel=baseline.target.kernel.name,
        gpu=gpu,
        input_sets=verification.input_sets if verification else 0,
        sizes=len(baseline.problems),
        explanation=outcome.explanation,
        measured_at=datetime.now(timezone.utc).isoformat(timespec="seconds"),
        original=_time(baseline.timing) if baseline.timing is not None else None,
        rewrite=rewrite,
        candidates=rows,
        llm=outcome.llm.summary() if outcome.llm is not None else "",
        transcript=outcome.llm.transcript() if outcome.llm is not None else (),
    )
