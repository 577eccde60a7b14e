"""A GPU worker that answers from a recording: a test and CI facility only, never a product path.

Where there is no GPU (CI, a laptop), the language server's end-to-end tests still need verify and time
answers that go through the same protocol types as the real worker's. `RecordedSandbox` has the methods of
`Sandbox` and answers them from a JSON file written by hand from a real run on a GPU:

    {
      "device": {"name": "NVIDIA H200", "compute_capability": [9, 0], ..., "ceilings": {...}},
      "kernels": {
        "saxpy": {
          "run_s": 0.5,
          "original_ms": 0.0832,
          "candidates": [{"block": [256], "median_ms": 0.0653}],
          "rejected": [{"block": [1024], "check": "mismatch", "message": "..."}]
        }
      }
    }

Rules, deliberately few: a kernel is matched by its name and the block of its benchmark launch. A listed
candidate gets its recorded time; a listed rejection fails verification with the given check; every other
launch of a recorded kernel verifies and times like the original ("no gain"). `run_s` (optional, 0 by
default) is how long each verify or time answer takes, as a GPU's runs would: a test that needs a job to
still hold the GPU when its next step arrives sets it, instead of racing a job that ends in a second. A
kernel the recording does not name is a `bad_request`, so a test can never pass on made-up numbers. The
device's driver version is "recorded", so results cached from a recording never mix with a real GPU's
(the cache keys hold it).

Chosen by `Engine.device()` when CUDA_AGENT_RECORDED_WORKER names a recording.
"""

from __future__ import annotations

import contextlib
import json
import time
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from cuda_agent.sandbox.plan import KernelUnderTest, Problem
from cuda_agent.sandbox.protocol import (
    TimeRequest,
    TimeTorchRequest,
    TimingResult,
    TorchTimingResult,
    VerifyRequest,
)
from cuda_agent.sandbox.reports import (
    Ceilings,
    CheckFailure,
    Comparison,
    DeviceInfo,
    TimingReport,
    VerificationReport,
    WorkerError,
)

RECORDED_WORKER_ENV = "CUDA_AGENT_RECORDED_WORKER"
SPREAD = 0.01  # recorded medians get a ±1% p10/p90: a recording holds medians, not every run
RUNS = 100
CHECKS = ("mismatch", "unwritten", "out_of_bounds", "input_modified", "nondeterministic")


@dataclass(frozen=True)
class RecordedKernel:
    original_ms: float
    run_s: float
    candidates: dict[tuple[int, ...], float]  # block → median ms
    rejected: dict[tuple[int, ...], tuple[str, str]]  # block → (check, message)


def _block(values: list[int] | tuple[int, ...]) -> tuple[int, ...]:
    """(256,), (256, 1) and (256, 1, 1) are the same block."""
    block = list(values)
    while len(block) > 1 and block[-1] == 1:
        block.pop()
    return tuple(block)


class RecordedSandbox:
    """The `Sandbox` interface, answered from a recording (see the module docstring)."""

    def __init__(self, device: DeviceInfo, kernels: dict[str, RecordedKernel]) -> None:
        self._device = device
        self._kernels = kernels

    @staticmethod
    def from_file(path: str | Path) -> RecordedSandbox:
        return RecordedSandbox.from_data(json.loads(Path(path).read_text()))

    @staticmethod
    def from_data(data: dict[str, Any]) -> RecordedSandbox:
        """From the recording's JSON, already read (a Ray actor gets it whole: its node may not have the
        file)."""
        d = data["device"]
        ceilings = d.get("ceilings")
        device = DeviceInfo(
            index=0,
            name=d["name"],
            compute_capability=tuple(d["compute_capability"]),  # type: ignore[arg-type]
            multiprocessors=d["multiprocessors"],
            l2_bytes=d["l2_bytes"],
            shared_bytes_per_block=d["shared_bytes_per_block"],
            shared_bytes_per_block_optin=d["shared_bytes_per_block_optin"],
            memory_bytes=d["memory_bytes"],
            driver_version="recorded",
            runtime_version=d.get("runtime_version", "recorded"),
            ceilings=Ceilings(ceilings["copy_bandwidth_gbs"], dict(ceilings.get("flops_tflops", {})))
            if ceilings
            else None,
        )
        kernels = {
            name: RecordedKernel(
                original_ms=k["original_ms"],
                run_s=float(k.get("run_s", 0.0)),
                candidates={_block(c["block"]): c["median_ms"] for c in k.get("candidates", [])},
                rejected={_block(r["block"]): (r["check"], r["message"]) for r in k.get("rejected", [])},
            )
            for name, k in data["kernels"].items()
        }
        return RecordedSandbox(device, kernels)

    # -- the Sandbox methods ---------------------------------------------------------------------------

    def device_info(self, measure_ceilings: bool = True, on_heartbeat: object = None) -> DeviceInfo:
        return self._device

    def verify(self, request: VerifyRequest, on_heartbeat: object = None) -> VerificationReport | WorkerError:
        recorded = self._recorded(request.candidate)
        if isinstance(recorded, WorkerError):
            return recorded
        time.sleep(recorded.run_s)
        labels = tuple(p.label for p in request.problems)
        seeds = tuple(range(request.input_sets))
        notes = (f"recorded result ({RECORDED_WORKER_ENV}), not a run on this machine",)
        rejection = recorded.rejected.get(_block(request.candidate.launches[0].block))
        if rejection is not None:
            check, message = rejection
            failure = CheckFailure(check, message, problem=labels[0], seed=0)  # type: ignore[arg-type]
            return VerificationReport(False, (failure,), labels, seeds, request.input_sets, CHECKS, notes)
        return VerificationReport(True, (), labels, seeds, request.input_sets, CHECKS, notes)

    def time(self, request: TimeRequest, on_heartbeat: object = None) -> TimingResult | WorkerError:
        reports = []
        for kernel in request.kernels:
            recorded = self._recorded(kernel)
            if isinstance(recorded, WorkerError):
                return recorded
            time.sleep(recorded.run_s)
            median = recorded.original_ms
            if kernel.label != "original":
                median = recorded.candidates.get(_block(kernel.launches[0].block), median)
            reports.append(self._report(kernel.label, median, request.problem, request))
        comparison = _compare(reports[0], reports[1], request.settle_early) if len(reports) == 2 else None
        return TimingResult(tuple(reports), comparison)

    def time_torch(self, request: TimeTorchRequest, on_heartbeat: object = None) -> TorchTimingResult:
        return TorchTimingResult(None, None, "PyTorch timings are not part of the recording")

    @contextlib.contextmanager
    def exclusive(self) -> Iterator[None]:
        """Sandbox.exclusive(): nothing runs beside anything here."""
        yield

    def close(self) -> None:
        """Nothing to stop: there is no process."""

    def kill(self) -> None:
        """Nothing to kill: there is no process."""

    def __enter__(self) -> RecordedSandbox:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    # -- helpers ---------------------------------------------------------------------------------------

    def _recorded(self, kernel: KernelUnderTest) -> RecordedKernel | WorkerError:
        recorded = self._kernels.get(kernel.compiled.name)
        if recorded is None:
            return WorkerError("bad_request", f"the recording has no results for {kernel.compiled.name}")
        return recorded

    def _report(self, label: str, median_ms: float, problem: Problem, request: TimeRequest) -> TimingReport:
        bandwidth = problem.bytes_moved / (median_ms * 1e-3) / 1e9 if problem.bytes_moved else None
        ceiling = request.ceilings_bandwidth_gbs or (
            self._device.ceilings.copy_bandwidth_gbs if self._device.ceilings else None
        )
        return TimingReport(
            label=label,
            median_ms=median_ms,
            p10_ms=median_ms * (1 - SPREAD),
            p90_ms=median_ms * (1 + SPREAD),
            runs=RUNS,
            bandwidth_gbs=bandwidth,
            roofline_fraction=bandwidth / ceiling if bandwidth and ceiling else None,
            bound="memory" if bandwidth and ceiling else None,
            ceiling=ceiling if bandwidth else None,
        )


def _compare(baseline: TimingReport, candidate: TimingReport, settle_early: bool) -> Comparison:
    ratio = candidate.median_ms / baseline.median_ms
    interval = (ratio * (1 - SPREAD), ratio * (1 + SPREAD))
    faster, slower = interval[1] < 1 - SPREAD, interval[0] > 1 + SPREAD
    verdict = "faster" if faster else "slower" if slower else "no gain"
    return Comparison(
        baseline=baseline,
        candidate=candidate,
        speedup=baseline.median_ms / candidate.median_ms,
        ratio_ci=interval,
        faster=faster,
        slower=slower,
        decision=f"{verdict} (recorded medians, {RECORDED_WORKER_ENV})",
        settled_early=settle_early and (faster or slower),  # as a real worker's: a clear verdict settles
    )
