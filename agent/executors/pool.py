"""A pool of GPU workers behind the `Executor` interface: each request goes to the next free worker.

The local pool (workers are this machine's GPU processes) and the Ray pool (workers are actors) are both
this, with different workers. The pool serves one GPU model: at the first device query it asks every
worker for its GPU and keeps those of the most common model, so a time measured on one worker is only ever
shown beside times from the same model (a time request's candidate and baseline run on one worker, always).
"""

from __future__ import annotations

import queue
import threading
import time
from collections import Counter
from collections.abc import Callable, Sequence
from concurrent.futures import ThreadPoolExecutor
from typing import Protocol, TypeVar

from cuda_agent.sandbox.protocol import (
    TimeRequest,
    TimeTorchRequest,
    TimingResult,
    TorchTimingResult,
    VerifyRequest,
)
from cuda_agent.sandbox.reports import DeviceInfo, VerificationReport, WorkerError
from cuda_agent.sandbox.sanitizer import SanitizerReport, SanitizerRequest, SanitizerSettings, not_checked

T = TypeVar("T")

RETRIES = 3  # a request whose worker is lost goes to another this often, then it is a crash
LOST_WAIT_S = 600.0  # with every worker lost, a request waits this long for one to come back
PROBE_S = 2.0  # how often a lost worker is asked whether it is back


class WorkerLost(Exception):
    """The worker itself is gone (its process killed, its node left the cluster): not the request's fault.
    The pool sends the request to another worker and takes this one back once it answers again."""


class Worker(Protocol):
    """One GPU's worker: a local sandbox process or a Ray actor. One request at a time."""

    @property
    def name(self) -> str: ...

    def device_info(self, measure_ceilings: bool = True) -> DeviceInfo | WorkerError: ...

    def verify(self, request: VerifyRequest) -> VerificationReport | WorkerError: ...

    def time(self, request: TimeRequest) -> TimingResult | WorkerError: ...

    def time_torch(self, request: TimeTorchRequest) -> TorchTimingResult | WorkerError: ...

    def sanitizer(self) -> str | None: ...

    def sanitize(self, request: SanitizerRequest, settings: SanitizerSettings) -> SanitizerReport: ...

    def alive(self) -> bool:
        """Whether it answers again after it was lost (False: still gone)."""
        ...

    def close(self) -> None: ...

    def kill(self) -> None: ...


def model_of(device: DeviceInfo) -> tuple[object, ...]:
    """What makes two GPUs' timings comparable: the same model and the same driver."""
    return (device.name, device.compute_capability, device.driver_version)


class WorkerPool:
    """The `Executor` over a list of workers."""

    def __init__(self, workers: Sequence[Worker], where: str) -> None:
        if not workers:
            raise ValueError("a pool needs at least one worker")
        self._all = list(workers)
        self._serving: list[Worker] = list(workers)
        self._where = where
        self._free: queue.Queue[Worker] = queue.Queue()
        for worker in self._serving:
            self._free.put(worker)
        self._lock = threading.Lock()
        self._device: DeviceInfo | WorkerError | None = None
        self.left_out: list[str] = []  # workers not serving, and why (another GPU model, no GPU)
        self._lost: dict[int, float] = {}  # id(worker) → when it was lost; back in `_free` once it answers
        self._closed = threading.Event()
        self.losses = 0  # requests sent again because their worker was lost

    @property
    def workers(self) -> int:
        return len(self._serving)

    @property
    def idle(self) -> int:
        """Workers free now (none: every one has a request in flight)."""
        return self._free.qsize()

    @property
    def where(self) -> str:
        count = len(self._serving)
        text = f"{self._where}: {count} worker{'s' if count != 1 else ''}"
        return f"{text} ({'; '.join(self.left_out)})" if self.left_out else text

    # -- the device ------------------------------------------------------------------------------------

    def device_info(self, measure_ceilings: bool = True) -> DeviceInfo | WorkerError:
        with self._lock:
            if self._device is None:
                self._device = self._choose_model()
            device = self._device
        if not measure_ceilings or isinstance(device, WorkerError):
            return device
        try:
            measured = self._run(lambda w: w.device_info(measure_ceilings=True))
        except WorkerLost:
            return device
        return measured if isinstance(measured, DeviceInfo) else device

    def _choose_model(self) -> DeviceInfo | WorkerError:
        """Ask every worker for its GPU; keep the workers of the most common model."""
        if len(self._all) == 1:
            return _asked(self._all[0])
        with ThreadPoolExecutor(max_workers=len(self._all)) as threads:
            answers = list(threads.map(_asked, self._all))
        devices = {id(w): a for w, a in zip(self._all, answers, strict=True) if isinstance(a, DeviceInfo)}
        if not devices:
            return answers[0]
        counts = Counter(model_of(d) for d in devices.values())
        model = max(counts, key=lambda m: (counts[m], -_first_index(m, self._all, devices)))
        chosen = next(d for d in devices.values() if model_of(d) == model)
        serving = [w for w in self._all if id(w) in devices and model_of(devices[id(w)]) == model]
        for worker, answer in zip(self._all, answers, strict=True):
            if isinstance(answer, WorkerError):
                self.left_out.append(f"{worker.name}: {answer.message}")
            elif model_of(answer) != model:
                self.left_out.append(f"{worker.name}: {answer.name}, not {chosen.name}: never compared")
        self._serving = serving
        self._free = queue.Queue()
        for worker in serving:
            self._free.put(worker)
        return chosen

    # -- requests --------------------------------------------------------------------------------------

    def verify(self, request: VerifyRequest) -> VerificationReport | WorkerError:
        return self._or_error(lambda w: w.verify(request))

    def time(self, request: TimeRequest) -> TimingResult | WorkerError:
        return self._or_error(lambda w: w.time(request))

    def time_torch(self, request: TimeTorchRequest) -> TorchTimingResult | WorkerError:
        return self._or_error(lambda w: w.time_torch(request))

    def sanitizer(self) -> str | None:
        try:
            return self._run(lambda w: w.sanitizer())
        except WorkerLost:
            return None

    def sanitize(self, request: SanitizerRequest, settings: SanitizerSettings) -> SanitizerReport:
        try:
            return self._run(lambda w: w.sanitize(request, settings))
        except WorkerLost as lost:
            return not_checked(str(lost))
        except Exception as exc:  # a bug of ours, a broken install: unchecked, and it says so
            return not_checked(f"the check failed: {exc!r}")

    def _or_error(self, step: Callable[[Worker], T]) -> T | WorkerError:
        try:
            return self._run(step)
        except WorkerLost as lost:
            return WorkerError("crash", str(lost), restarted=True)

    def _run(self, step: Callable[[Worker], T]) -> T:
        """Run `step` on the next free worker (waiting for one: first come, first served); on another
        when its worker is lost, up to RETRIES times."""
        for _ in range(RETRIES + 1):
            worker = self._take()
            try:
                result = step(worker)
            except WorkerLost:
                self._lose(worker)
                continue
            self._free.put(worker)
            return result
        raise WorkerLost(f"{RETRIES + 1} workers were lost in turn while running this request")

    def _take(self) -> Worker:
        while True:
            try:
                return self._free.get(timeout=PROBE_S)
            except queue.Empty:
                with self._lock:
                    every_one_lost = len(self._lost) == len(self._serving)
                    since = max(self._lost.values(), default=time.monotonic())
                if every_one_lost and time.monotonic() - since > LOST_WAIT_S:
                    raise WorkerLost(f"every worker of the pool was lost {LOST_WAIT_S:g} s ago") from None

    def _lose(self, worker: Worker) -> None:
        """Keep the worker out until it answers again (Ray restarting its actor, a node coming back)."""
        with self._lock:
            self._lost[id(worker)] = time.monotonic()
            self.losses += 1
        threading.Thread(target=self._recover, args=(worker,), daemon=True, name="cuda-agent-probe").start()

    def _recover(self, worker: Worker) -> None:
        while not self._closed.is_set():
            if worker.alive():
                with self._lock:
                    self._lost.pop(id(worker), None)
                self._free.put(worker)
                return
            self._closed.wait(PROBE_S)

    def close(self) -> None:
        self._closed.set()
        for worker in self._all:
            worker.close()

    def kill(self) -> None:
        for worker in self._all:
            worker.kill()


def _asked(worker: Worker) -> DeviceInfo | WorkerError:
    try:
        return worker.device_info(measure_ceilings=False)
    except WorkerLost as lost:
        return WorkerError("crash", str(lost))


def _first_index(model: tuple[object, ...], workers: list[Worker], devices: dict[int, DeviceInfo]) -> int:
    """Among equally common models, the one of the earliest worker wins (GPU 0's, usually)."""
    return next(i for i, w in enumerate(workers) if id(w) in devices and model_of(devices[id(w)]) == model)
