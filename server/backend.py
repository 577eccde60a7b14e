"""The engine behind the server: compiling and asking for the GPU, off the event loop.

One Backend serves every session of a process (a TCP server serves clients one after another, and the
GPU worker should outlive a client). The Engine is not thread-safe (its device probe starts the worker
process), so it lives on one dedicated thread and every call goes through that thread's queue.
Results cross into the server as the plain dataclasses below, so no server module touches sandbox types.
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from typing import Literal, TypeVar

from cuda_agent.agent.engine import Engine, EngineSettings
from cuda_agent.agent.targets import FileTargets, KernelTarget

logger = logging.getLogger(__name__)

T = TypeVar("T")

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
class GpuStatus:
    available: bool
    name: str | None
    reason: str  # why there is none, from the engine


class Backend:
    def __init__(self, settings: EngineSettings | None = None) -> None:
        self._settings = settings or EngineSettings()
        self._engine: Engine | None = None  # created on the engine thread, on first use
        self._thread = ThreadPoolExecutor(max_workers=1, thread_name_prefix="cuda-agent-engine")
        self._gpu: GpuStatus | None = None
        self._gpu_lock = asyncio.Lock()

    async def _run(self, work: Callable[[], T]) -> T:
        return await asyncio.get_running_loop().run_in_executor(self._thread, work)

    def _get_engine(self) -> Engine:
        if self._engine is None:
            self._engine = Engine(self._settings)
        return self._engine

    # -- the GPU ---------------------------------------------------------------------------------------

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
        for target in [t for t in targets.targets if _compilable(t)][:MAX_KERNELS_PER_SAVE]:
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
                spills = (usage.spill_store_bytes or 0) + (usage.spill_load_bytes or 0)
                resources[target.kernel.name] = KernelResources(
                    usage.registers, usage.shared_bytes, spills, result.backend, result.kernel.arch
                )
            elif result.errors:
                break  # the whole file failed: every other kernel's compile would repeat these errors
        return FileCompile(tuple(problems.values()), resources, complete=True)

    def close(self) -> None:
        def close_engine() -> None:
            if self._engine is not None:
                self._engine.close()

        try:
            self._thread.submit(close_engine).result(timeout=10)
        except Exception:
            logger.exception("closing the engine failed")
        self._thread.shutdown(wait=False, cancel_futures=True)


def _compilable(target: KernelTarget) -> bool:
    """A kernel NVRTC can be asked for by name: a template only through its spec's `instantiate`."""
    if not target.kernel.name:
        return False
    if target.kernel.template_parameters:
        return bool(target.spec and target.spec.instantiate)
    return True
