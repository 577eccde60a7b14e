"""The caller's side of the GPU worker. Never imports CuPy or torch: the worker owns the CUDA context.

    with Sandbox(gpu_index=0, timeout_s=5.0) as sandbox:
        info = sandbox.device_info()            # DeviceInfo | WorkerError
        report = sandbox.verify(VerifyRequest(...))  # VerificationReport | WorkerError
        timing = sandbox.time(TimeRequest(...))      # TimingResult | WorkerError

A request whose worker sends nothing (no heartbeat, no answer) for `timeout_s` is a hung kernel: the
worker is killed and the call returns WorkerError(kind="timeout", restarted=True). A worker that dies
or reports a sticky CUDA error is replaced likewise. Restarts are quick because a standby worker is
started (CUDA context made, kernels warmed) while the active one works; it takes over at once.
"""

from __future__ import annotations

import contextlib
import multiprocessing
import signal
import threading
import time
from collections.abc import Callable, Iterator
from dataclasses import replace
from multiprocessing.connection import Connection
from multiprocessing.process import BaseProcess
from typing import Any

from cuda_agent.sandbox.protocol import (
    IMPORTING_TORCH,
    DeviceInfoRequest,
    Heartbeat,
    PrepareTorch,
    TimeRequest,
    TimeTorchRequest,
    TimingResult,
    TorchTimingResult,
    VerifyRequest,
)
from cuda_agent.sandbox.reports import DeviceInfo, VerificationReport, WorkerError
from cuda_agent.sandbox.worker import worker_main

OnHeartbeat = Callable[[Heartbeat], None]


class _Worker:
    """One worker process and our end of its pipe."""

    def __init__(self, context: Any, gpu_index: int) -> None:
        ours, theirs = context.Pipe(duplex=True)
        self.process: BaseProcess = context.Process(
            target=worker_main, args=(theirs, gpu_index), name=f"cuda-agent-gpu{gpu_index}", daemon=True
        )
        self.process.start()
        theirs.close()  # only the child holds its end now, so its death reads as EOF here
        self.conn: Connection = ours
        self.ready = False

    def wait_ready(self, timeout_s: float) -> WorkerError | None:
        deadline = time.monotonic() + timeout_s
        while not self.ready:
            remaining = deadline - time.monotonic()
            if remaining <= 0:
                return WorkerError("timeout", f"the GPU worker did not start within {timeout_s:.0f} s")
            try:
                if not self.conn.poll(min(remaining, 0.25)):
                    if not self.process.is_alive() and not self.conn.poll(0):
                        return WorkerError("crash", f"the GPU worker {self.exit_reason()} while starting")
                    continue
                message = self.conn.recv()
            except (EOFError, OSError):
                return WorkerError("crash", f"the GPU worker {self.exit_reason()} while starting")
            if isinstance(message, WorkerError):
                return message
            self.ready = isinstance(message, Heartbeat) and message.note == "ready"
        return None

    def exit_reason(self) -> str:
        self.process.join(timeout=1.0)
        code = self.process.exitcode
        if code is None:
            return "closed its pipe"
        if code < 0:
            try:
                return f"was killed by {signal.Signals(-code).name}"
            except ValueError:
                return f"was killed by signal {-code}"
        return f"exited with code {code}"

    def stop(self, kill: bool) -> None:
        """Ask it to leave (or kill it: a hung kernel never reads the pipe) and reap it in the background,
        as a process with a running kernel can take a while to be torn down by the driver."""
        if not kill:
            try:
                self.conn.send(None)
            except (OSError, ValueError):
                kill = True
        if kill and self.process.is_alive():
            self.process.kill()
        self.conn.close()
        threading.Thread(target=self.process.join, kwargs={"timeout": 30}, daemon=True).start()


class Sandbox:
    """Runs verify/time requests on GPU `gpu_index` in a worker process. One request at a time."""

    def __init__(
        self,
        gpu_index: int = 0,
        *,
        timeout_s: float = 5.0,
        start_timeout_s: float = 120.0,
        standby: bool = True,
    ) -> None:
        self.gpu_index = gpu_index
        self.timeout_s = timeout_s
        self.start_timeout_s = start_timeout_s  # the first start compiles CuPy's kernels: seconds
        self.standby = standby
        self.restarts = 0
        self._context = multiprocessing.get_context("spawn")
        self._lock = threading.Lock()
        self._active: _Worker | None = None
        self._spare: _Worker | None = None
        self._no_gpu: WorkerError | None = None
        self._device: DeviceInfo | None = None
        self._torch_used = False  # an oracle needed torch: the standby loads it before it is needed

    # -- requests --------------------------------------------------------------------------------------

    def device_info(
        self, measure_ceilings: bool = True, on_heartbeat: OnHeartbeat | None = None
    ) -> DeviceInfo | WorkerError:
        result = self._request(DeviceInfoRequest(measure_ceilings), on_heartbeat)
        if isinstance(result, DeviceInfo) and (result.ceilings is not None or self._device is None):
            self._device = result
        return result

    def verify(
        self, request: VerifyRequest, on_heartbeat: OnHeartbeat | None = None
    ) -> VerificationReport | WorkerError:
        return self._request(request, on_heartbeat)

    def time(
        self, request: TimeRequest, on_heartbeat: OnHeartbeat | None = None
    ) -> TimingResult | WorkerError:
        """Ceilings left out of the request are filled from the last measured device_info()."""
        ceilings = self._device.ceilings if self._device else None
        if request.ceilings_bandwidth_gbs is None and ceilings is not None:
            flop_rate = ceilings.flops_tflops.get(request.problem.flop_dtype)
            request = replace(
                request,
                ceilings_bandwidth_gbs=ceilings.copy_bandwidth_gbs,
                ceilings_tflops=request.ceilings_tflops or flop_rate,
            )
        return self._request(request, on_heartbeat)

    def time_torch(
        self, request: TimeTorchRequest, on_heartbeat: OnHeartbeat | None = None
    ) -> TorchTimingResult | WorkerError:
        """The problem's PyTorch oracle timed eager and under torch.compile (the compiler a user would
        otherwise reach for)."""
        return self._request(request, on_heartbeat)

    @contextlib.contextmanager
    def exclusive(self) -> Iterator[None]:
        """Hold the GPU for work outside the worker (a compute-sanitizer run, a process of its own): no
        verify or time request starts until the block ends, so none is timed beside it."""
        with self._lock:
            yield

    def _request(self, message: object, on_heartbeat: OnHeartbeat | None) -> Any:
        with self._lock:
            worker = self._acquire()
            if isinstance(worker, WorkerError):
                return worker
            try:
                worker.conn.send(message)
            except (OSError, ValueError) as exc:
                return self._lost(worker, "crash", f"the GPU worker could not take the request: {exc}")
            deadline = time.monotonic() + self.timeout_s
            last_word = "the request was sent"
            while True:
                remaining = deadline - time.monotonic()
                if remaining <= 0:
                    # The last heartbeat says where it stopped: in a kernel, or (a bug of ours) host work.
                    return self._lost(
                        worker, "timeout", f"timed out after {self.timeout_s:.1f} s (kernel did not finish; "
                        f"last word from the worker: {last_word})",
                    )  # fmt: skip
                try:
                    if not worker.conn.poll(min(remaining, 0.25)):
                        if not worker.process.is_alive() and not worker.conn.poll(0):
                            return self._lost(worker, "crash", f"the GPU worker {worker.exit_reason()}")
                        continue
                    reply = worker.conn.recv()
                except (EOFError, OSError):
                    return self._lost(worker, "crash", f"the GPU worker {worker.exit_reason()}")
                if isinstance(reply, Heartbeat):
                    deadline = time.monotonic() + self.timeout_s + reply.expect_silence_s
                    last_word = reply.note
                    if reply.note == IMPORTING_TORCH and not self._torch_used:
                        self._torch_used = True
                        self._prepare_torch(self._spare)
                    if on_heartbeat is not None:
                        on_heartbeat(reply)
                    continue
                if isinstance(reply, WorkerError) and reply.kind == "cuda_error":
                    return self._lost(worker, "cuda_error", reply.message)
                return reply

    # -- workers ---------------------------------------------------------------------------------------

    def _spawn(self) -> _Worker:
        worker = _Worker(self._context, self.gpu_index)
        if self._torch_used:
            self._prepare_torch(worker)
        return worker

    @staticmethod
    def _prepare_torch(worker: _Worker | None) -> None:
        """Ask a standby worker to load torch now (the pipe holds the notice until it is ready)."""
        if worker is not None:
            with contextlib.suppress(OSError, ValueError):  # a spare that died is replaced when needed
                worker.conn.send(PrepareTorch())

    def _acquire(self) -> _Worker | WorkerError:
        """The active worker, ready; a spare is started beside it, to take over after a crash."""
        if self._no_gpu is not None:
            return self._no_gpu
        if self._active is None:
            self._active, self._spare = self._spare or self._spawn(), None
        error = self._active.wait_ready(self.start_timeout_s)
        if error is not None:
            self._active.stop(kill=True)
            self._active = None
            if error.kind == "no_gpu":  # it will not change: answer at once from now on
                self._no_gpu = error
                if self._spare is not None:
                    self._spare.stop(kill=True)
                    self._spare = None
            return error
        if self.standby and self._spare is None:
            self._spare = self._spawn()
        return self._active

    def _lost(self, worker: _Worker, kind: str, message: str) -> WorkerError:
        """The worker hung, died or lost its context: kill it, put the spare (or a new one) in its place."""
        worker.stop(kill=True)
        self._active, self._spare = self._spare or self._spawn(), None
        self.restarts += 1
        return WorkerError(kind, message, restarted=True)  # type: ignore[arg-type]

    def restart(self) -> None:
        with self._lock:
            if self._active is not None:
                self._lost(self._active, "crash", "restart asked for")

    def close(self) -> None:
        with self._lock:
            for worker in (self._active, self._spare):
                if worker is not None:
                    worker.stop(kill=False)
            self._active = self._spare = None

    def kill(self) -> None:
        """Kill the workers now, without the lock that a running request holds (its kernel may run for
        seconds more): for a process that is leaving and will not send another request."""
        for worker in (self._active, self._spare):
            if worker is not None and worker.process.is_alive():
                worker.process.kill()

    def __enter__(self) -> Sandbox:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()
