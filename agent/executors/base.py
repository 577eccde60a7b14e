"""The executor interface, its settings and the choice between executors."""

from __future__ import annotations

import os
from dataclasses import dataclass
from typing import Protocol

from cuda_agent.sandbox.protocol import (
    TimeRequest,
    TimeTorchRequest,
    TimingResult,
    TorchTimingResult,
    VerifyRequest,
)
from cuda_agent.sandbox.reports import DeviceInfo, VerificationReport, WorkerError
from cuda_agent.sandbox.sanitizer import SanitizerReport, SanitizerRequest, SanitizerSettings

RAY_ADDRESS_ENV = "CUDA_AGENT_RAY_ADDRESS"


@dataclass(frozen=True)
class PoolSettings:
    """Which GPUs run the requests. Not part of any cache key: a result measured on an H200 is the same
    whichever executor reached it (the device is in the keys)."""

    gpus: tuple[int, ...] = ()  # --gpus 0,1,…: one worker per GPU of this machine; () = the engine's one
    ray_address: str | None = None  # --ray ADDRESS (or $CUDA_AGENT_RAY_ADDRESS); "auto": a running cluster
    ray_workers: int | None = None  # actors to start; None = one per GPU the cluster has

    @staticmethod
    def from_environment(
        gpus: tuple[int, ...] = (), ray_address: str | None = None, ray_workers: int | None = None
    ) -> PoolSettings:
        address = ray_address or os.environ.get(RAY_ADDRESS_ENV) or None
        return PoolSettings(gpus=gpus, ray_address=address, ray_workers=ray_workers)


class Executor(Protocol):
    """What the engine needs from wherever requests run. Every method may be called from several threads at
    once; a request waits for a free worker."""

    @property
    def workers(self) -> int:
        """How many requests can run at once (the number of GPUs serving)."""
        ...

    @property
    def where(self) -> str:
        """The executor in words, for a report ("2 GPUs of this machine", "Ray cluster at …: 8 workers")."""
        ...

    def device_info(self, measure_ceilings: bool = True) -> DeviceInfo | WorkerError: ...

    def verify(self, request: VerifyRequest) -> VerificationReport | WorkerError: ...

    def time(self, request: TimeRequest) -> TimingResult | WorkerError: ...

    def time_torch(self, request: TimeTorchRequest) -> TorchTimingResult | WorkerError: ...

    def sanitizer(self) -> str | None:
        """The compute-sanitizer the workers run, or None where they have none."""
        ...

    def sanitize(self, request: SanitizerRequest, settings: SanitizerSettings) -> SanitizerReport:
        """Run compute-sanitizer on a worker's GPU while that GPU runs nothing else."""
        ...

    def close(self) -> None: ...

    def kill(self) -> None:
        """Stop now, from any thread (a process that is leaving)."""
        ...


def open_executor(pool: PoolSettings, gpu_index: int, timeout_s: float) -> Executor:
    """The executor `pool` asks for: a Ray cluster, several local GPUs, or the one GPU `gpu_index`; the
    recorded worker (CUDA_AGENT_RECORDED_WORKER, tests and CI only) stands in for each GPU worker."""
    if pool.ray_address:
        from cuda_agent.agent.executors.ray_pool import RayPool

        return RayPool.connect(pool.ray_address, pool.ray_workers, timeout_s)
    from cuda_agent.agent.executors.local import one_worker
    from cuda_agent.agent.executors.pool import WorkerPool

    if len(pool.gpus) > 1:
        return WorkerPool([one_worker(index, timeout_s) for index in pool.gpus], "GPUs of this machine")
    return WorkerPool([one_worker(pool.gpus[0] if pool.gpus else gpu_index, timeout_s)], "this machine")
