"""This machine's GPUs as pool workers: a sandbox worker process per GPU (`--gpus 0,1,…`, or the engine's
one GPU); agent/executors/pool.py hands them requests."""

from __future__ import annotations

import os
from dataclasses import replace

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
from cuda_agent.sandbox.sanitizer import (
    NOT_FOUND,
    SanitizerReport,
    SanitizerRequest,
    SanitizerSettings,
    find_compute_sanitizer,
    not_checked,
    sanitize,
)


class SandboxWorker:
    """One GPU's sandbox (or, for tests and CI, the recording standing in for it) as a pool worker."""

    def __init__(self, sandbox: Sandbox | RecordedSandbox, gpu_index: int) -> None:
        self.sandbox = sandbox
        self.gpu_index = gpu_index

    @property
    def name(self) -> str:
        return f"GPU {self.gpu_index}"

    def device_info(self, measure_ceilings: bool = True) -> DeviceInfo | WorkerError:
        return self.sandbox.device_info(measure_ceilings=measure_ceilings)

    def verify(self, request: VerifyRequest) -> VerificationReport | WorkerError:
        return self.sandbox.verify(request)

    def time(self, request: TimeRequest) -> TimingResult | WorkerError:
        return self.sandbox.time(request)

    def time_torch(self, request: TimeTorchRequest) -> TorchTimingResult | WorkerError:
        return self.sandbox.time_torch(request)

    def sanitizer(self) -> str | None:
        return find_compute_sanitizer()

    def sanitize(self, request: SanitizerRequest, settings: SanitizerSettings) -> SanitizerReport:
        executable = find_compute_sanitizer()
        if executable is None:
            return not_checked(NOT_FOUND)
        with self.sandbox.exclusive():  # no verify or time request is timed beside it
            return sanitize(replace(request, gpu_index=self.gpu_index), settings, executable)

    def alive(self) -> bool:
        return True  # a sandbox restarts its own worker process; it is never lost

    def close(self) -> None:
        self.sandbox.close()

    def kill(self) -> None:
        self.sandbox.kill()


def one_worker(gpu_index: int, timeout_s: float) -> SandboxWorker:
    """The real GPU worker of `gpu_index`; or, for tests and CI only, a recording named by
    CUDA_AGENT_RECORDED_WORKER (sandbox/recorded.py), answering through the same protocol types."""
    recording = os.environ.get(RECORDED_WORKER_ENV)
    if recording:
        return SandboxWorker(RecordedSandbox.from_file(recording), gpu_index)
    return SandboxWorker(Sandbox(gpu_index=gpu_index, timeout_s=timeout_s), gpu_index)
