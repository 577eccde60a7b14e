"""A Ray cluster's GPUs: one sandbox worker per GPU as a Ray actor (`num_gpus=1`).

Ray places the actors and restarts one whose process dies (a kill -9, a node leaving); the pool sends the
request it had in flight to another worker and takes the actor back once it answers again (agent/executors/
pool.py): a lost worker costs its in-flight candidate's time, nothing else. Every
node needs cuda-agent installed with its `gpu` extra (and `cluster`); the engine compiles here and sends
compiled kernels, so nodes need no compiler and no sources. Ray is optional (`pip install
'cuda-agent[cluster]'`); without it `--ray` says what to install.
"""

from __future__ import annotations

import contextlib
import json
import os
from pathlib import Path
from typing import Any

from cuda_agent.agent.executors.local import SandboxWorker
from cuda_agent.agent.executors.pool import WorkerLost, WorkerPool
from cuda_agent.sandbox.client import Sandbox
from cuda_agent.sandbox.protocol import (
    TimeRequest,
    TimeTorchRequest,
    TimingResult,
    TorchTimingResult,
    VerifyRequest,
)
from cuda_agent.sandbox.recorded import RECORDED_WORKER_ENV, RecordedSandbox
from cuda_agent.sandbox.reports import DeviceInfo, VerificationReport, WorkerError
from cuda_agent.sandbox.sanitizer import SanitizerReport, SanitizerRequest, SanitizerSettings

INSTALL_HINT = "Ray is not installed: pip install 'cuda-agent[cluster]' (here and on every node)"
# A request that has not come back after this is a worker stuck beyond the sandbox's own launch timeout
# (which kills a hung kernel after seconds): the actor is killed, Ray starts another.
REQUEST_TIMEOUT_S = 900.0
RESTARTS = -1  # an actor is restarted however often it dies: each death costs only its request
PROBE_TIMEOUT_S = 10.0  # a lost actor asked whether it is back: how long its answer may take
# An actor's first answer (placed, started, its worker process up): one still not placed after this (no
# free GPU, a node that left) is left out of the pool.
START_TIMEOUT_S = 180.0


class RayUnavailable(Exception):
    """Ray is missing, or the cluster cannot be reached or has no GPU: the message says which."""


class GpuActor:
    """Runs on a node, in a process of its own, holding one GPU (Ray sets CUDA_VISIBLE_DEVICES, so the
    GPU is index 0 there). `recording` stands in for the GPU in tests and CI (sandbox/recorded.py)."""

    def __init__(self, recording: str | None, timeout_s: float) -> None:
        sandbox = (
            RecordedSandbox.from_data(json.loads(recording))
            if recording is not None
            else Sandbox(gpu_index=0, timeout_s=timeout_s)
        )
        self._worker = SandboxWorker(sandbox, 0)

    def pid(self) -> int:
        return os.getpid()

    def device_info(self, measure_ceilings: bool) -> DeviceInfo | WorkerError:
        return self._worker.device_info(measure_ceilings)

    def verify(self, request: VerifyRequest) -> VerificationReport | WorkerError:
        return self._worker.verify(request)

    def time(self, request: TimeRequest) -> TimingResult | WorkerError:
        return self._worker.time(request)

    def time_torch(self, request: TimeTorchRequest) -> TorchTimingResult | WorkerError:
        return self._worker.time_torch(request)

    def sanitizer(self) -> str | None:
        return self._worker.sanitizer()

    def sanitize(self, request: SanitizerRequest, settings: SanitizerSettings) -> SanitizerReport:
        return self._worker.sanitize(request, settings)

    def close(self) -> None:
        self._worker.close()


class RayWorker:
    """The driver's handle on one actor: a pool worker whose requests are Ray calls."""

    def __init__(self, ray: Any, actor: Any, index: int) -> None:
        self._ray = ray
        self.actor = actor
        self.index = index

    @property
    def name(self) -> str:
        return f"Ray actor {self.index}"

    def _call(self, method: str, *args: object, timeout_s: float = REQUEST_TIMEOUT_S) -> Any:
        """The actor's answer; WorkerLost when the actor died meanwhile or does not answer (a kernel's
        crash or hang is answered by its sandbox, as on a local GPU: only the actor's own loss is this)."""
        exceptions = self._ray.exceptions
        try:
            return self._ray.get(getattr(self.actor, method).remote(*args), timeout=timeout_s)
        except exceptions.GetTimeoutError:
            self._ray.kill(self.actor, no_restart=False)  # Ray starts it again
            raise WorkerLost(f"{self.name} did not answer within {timeout_s:g} s") from None
        except exceptions.RayActorError as exc:
            raise WorkerLost(f"{self.name} was lost: {str(exc).splitlines()[0]}") from None

    def alive(self) -> bool:
        try:
            self._call("pid", timeout_s=PROBE_TIMEOUT_S)
        except WorkerLost:
            return False
        return True

    def pid(self) -> int:
        return int(self._call("pid"))

    def device_info(self, measure_ceilings: bool = True) -> DeviceInfo | WorkerError:
        timeout_s = REQUEST_TIMEOUT_S if measure_ceilings else START_TIMEOUT_S
        return self._call("device_info", measure_ceilings, timeout_s=timeout_s)

    def verify(self, request: VerifyRequest) -> VerificationReport | WorkerError:
        return self._call("verify", request)

    def time(self, request: TimeRequest) -> TimingResult | WorkerError:
        return self._call("time", request)

    def time_torch(self, request: TimeTorchRequest) -> TorchTimingResult | WorkerError:
        return self._call("time_torch", request)

    def sanitizer(self) -> str | None:
        found = self._call("sanitizer")
        return found if isinstance(found, str) else None

    def sanitize(self, request: SanitizerRequest, settings: SanitizerSettings) -> SanitizerReport:
        return self._call("sanitize", request, settings)

    def close(self) -> None:
        with contextlib.suppress(Exception):  # already gone: nothing to close
            self._ray.get(self.actor.close.remote(), timeout=30)
        self._ray.kill(self.actor, no_restart=True)

    def kill(self) -> None:
        self._ray.kill(self.actor, no_restart=True)


def import_ray() -> Any:
    try:
        import ray
    except ImportError as exc:
        raise RayUnavailable(INSTALL_HINT) from exc
    return ray


class RayPool(WorkerPool):
    """One actor per GPU of the cluster (or `workers` of them)."""

    def __init__(self, workers: list[RayWorker], address: str) -> None:
        super().__init__(workers, f"Ray cluster at {address}")
        self.ray_workers = workers

    @staticmethod
    def connect(address: str, workers: int | None, timeout_s: float) -> RayPool:
        """Join the cluster at `address` ("auto": the one running here; "local": start one on this
        machine) and start the actors."""
        ray = import_ray()
        if not ray.is_initialized():
            try:
                ray.init(
                    address=None if address == "local" else address,
                    include_dashboard=False,
                    log_to_driver=False,
                    configure_logging=False,
                )
            except (ConnectionError, RuntimeError, ValueError) as exc:
                raise RayUnavailable(f"cannot join the Ray cluster at {address}: {exc}") from exc
        # The live nodes' GPUs: the cluster's total still counts a node that left until its death is noticed.
        gpus = int(sum(n.get("Resources", {}).get("GPU", 0) for n in ray.nodes() if n.get("Alive")))
        count = min(workers, gpus) if workers is not None else gpus
        if count < 1 or gpus < 1:
            raise RayUnavailable(f"the Ray cluster at {address} has no GPU ({gpus} in its resources)")
        recording_path = os.environ.get(RECORDED_WORKER_ENV)
        recording = Path(recording_path).read_text() if recording_path else None
        remote = ray.remote(GpuActor).options(
            num_gpus=1, max_restarts=RESTARTS, max_task_retries=0, max_concurrency=1
        )
        actors = [RayWorker(ray, remote.remote(recording, timeout_s), i) for i in range(count)]
        return RayPool(actors, address)
