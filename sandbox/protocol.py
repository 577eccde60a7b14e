"""Requests the caller sends to the GPU worker, and what each answers. Pickled over a pipe."""

from __future__ import annotations

from dataclasses import dataclass

from cuda_agent.sandbox.plan import KernelUnderTest, Problem
from cuda_agent.sandbox.reports import (
    CheckFailure,
    Comparison,
    DeviceInfo,
    TimingReport,
    VerificationReport,
    WorkerError,
)


@dataclass(frozen=True)
class DeviceInfoRequest:
    """Answered with DeviceInfo. Ceilings are measured (about a second) unless cached ones are given."""

    measure_ceilings: bool = True


@dataclass(frozen=True)
class VerifyRequest:
    """Answered with VerificationReport.

    `reference` is the original kernel, the oracle when the problems carry no PyTorch oracle.
    """

    candidate: KernelUnderTest
    problems: tuple[Problem, ...]
    reference: KernelUnderTest | None = None
    input_sets: int = 5
    base_seed: int | None = None  # None: fresh seeds from the OS; set only to replay a report


@dataclass(frozen=True)
class TimeRequest:
    """Answered with TimingResult. Each kernel's launches hold one LaunchPlan, for `problem`.

    With two kernels, runs are interleaved (baseline, candidate, baseline, ...) on the same fresh inputs
    and a Comparison is made. Outputs of sampled timed runs are checked against `reference` (or the
    problem's PyTorch oracle), so a kernel that changes behaviour after its first launches fails.
    """

    kernels: tuple[KernelUnderTest, ...]
    problem: Problem
    reference: KernelUnderTest | None = None
    budget_s: float = 0.6
    min_runs: int = 10
    max_runs: int = 500
    ceilings_bandwidth_gbs: float | None = None  # for the roofline fields and the plausibility floor
    ceilings_tflops: float | None = None
    base_seed: int | None = None  # None: fresh seeds from the OS; set only to replay a run
    # With two kernels: stop as soon as the verdict and the speedup are settled (paired.settled), not at
    # the budget, and check the last run's outputs alone. A search's screening measurement; what is shown
    # is timed again without it, every check included (Engine.confirm).
    settle_early: bool = False
    # A GPU wait before each start event keeps the host's launch cost out of the time
    # (sandbox/launch_cover.py). Off only to measure what it hides.
    hide_launch_cost: bool = True


@dataclass(frozen=True)
class TimingResult:
    reports: tuple[TimingReport, ...]
    comparison: Comparison | None = None
    failures: tuple[CheckFailure, ...] = ()  # timed-output mismatches and implausible times, per kernel label


@dataclass(frozen=True)
class TimeTorchRequest:
    """Answered with TorchTimingResult: the problem's PyTorch oracle, as a function of its inputs, timed
    with torch eager and with `torch.compile` (what a user would otherwise reach for). Timed like kernels:
    warm-up, fresh inputs and a flushed L2 before every run, CUDA events; compile time excluded."""

    problem: Problem
    budget_s: float = 0.6  # timed work per variant
    min_runs: int = 10
    max_runs: int = 500
    ceilings_bandwidth_gbs: float | None = None  # None: the worker's measured ones, when it has them
    ceilings_tflops: float | None = None
    compile: bool = True  # False: eager only (skips tens of seconds of compiling)


@dataclass(frozen=True)
class TorchTimingResult:
    eager: TimingReport | None  # None when the expression failed (see note)
    compiled: TimingReport | None  # None when torch.compile failed or was not asked for (see note)
    note: str = ""  # what was timed and anything that went wrong, for a person


@dataclass(frozen=True)
class PrepareTorch:
    """A notice, not a request (nothing is answered): import torch in the background. The caller sends it
    to its standby worker once an oracle has needed torch, so that the worker taking over after a crash
    or a hang does not pay torch's start (seconds) on the way to its first verdict."""


IMPORTING_TORCH = "importing torch for the oracle"  # the heartbeat note that tells the caller torch is used


@dataclass(frozen=True)
class Heartbeat:
    """Sent by the worker after every synchronised launch, so the caller can tell slow from hung."""

    note: str = ""
    # Host work that cannot hang on the GPU comes next (importing torch): allow this much more silence.
    expect_silence_s: float = 0.0


Request = DeviceInfoRequest | VerifyRequest | TimeRequest | TimeTorchRequest
Response = DeviceInfo | VerificationReport | TimingResult | TorchTimingResult | WorkerError
