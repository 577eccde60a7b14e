"""What comes back from compiling, verifying and timing: plain, picklable data."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Literal

from cuda_agent.sandbox.plan import CompiledKernel

Severity = Literal["error", "warning", "note"]


@dataclass(frozen=True)
class CompileDiagnostic:
    severity: Severity
    message: str
    line: int | None = None  # 1-based, in the file the user edits
    column: int | None = None  # 1-based, in characters; None when the compiler does not say (ptxas)
    file: str | None = None


@dataclass(frozen=True)
class CompileResult:
    ok: bool
    kernel: CompiledKernel | None
    diagnostics: tuple[CompileDiagnostic, ...] = ()
    backend: str = ""  # "nvrtc" or "nvcc": the one whose result this is
    seconds: float = 0.0
    log: str = ""

    @property
    def errors(self) -> tuple[CompileDiagnostic, ...]:
        return tuple(d for d in self.diagnostics if d.severity == "error")


CheckName = Literal[
    "compile", "launch", "timeout", "crash",
    "mismatch", "unwritten", "out_of_bounds", "input_modified",
    "nondeterministic", "timed_mismatch", "implausible", "aliasing",
]  # fmt: skip


@dataclass(frozen=True)
class CheckFailure:
    """One failed check, precise enough to replay: which check, which buffer, which input set."""

    check: CheckName
    message: str  # one line for a person
    argument: str | None = None
    problem: str | None = None  # Problem.label
    seed: int | None = None
    bad_elements: int | None = None
    total_elements: int | None = None
    max_abs_error: float | None = None
    max_rel_error: float | None = None
    first_bad_index: tuple[int, ...] | None = None
    expected: float | None = None  # at the first bad index
    actual: float | None = None
    kernel: str | None = None  # KernelUnderTest.label, where a request times several kernels


@dataclass(frozen=True)
class VerificationReport:
    passed: bool
    failures: tuple[CheckFailure, ...] = ()
    problems: tuple[str, ...] = ()  # labels of the sizes verified
    seeds: tuple[int, ...] = ()
    input_sets: int = 0
    checks_run: tuple[str, ...] = ()  # names of the checks that ran, for "how it was verified"
    notes: tuple[str, ...] = ()
    seconds: float = 0.0

    @property
    def reason(self) -> str:
        return self.failures[0].message if self.failures else ""


@dataclass(frozen=True)
class TimingReport:
    """One kernel's timed runs on one problem (milliseconds)."""

    label: str
    median_ms: float
    p10_ms: float
    p90_ms: float
    runs: int
    times_ms: tuple[float, ...] = ()
    bandwidth_gbs: float | None = None  # achieved, from the problem's bytes_moved
    flop_rate_tflops: float | None = None
    roofline_fraction: float | None = None  # of the binding ceiling
    floor_ms: float | None = None  # the fastest time physics allows at the measured ceilings
    bound: str | None = None  # which ceiling sets floor_ms: "memory" (copy bandwidth) or "compute"
    ceiling: float | None = None  # that ceiling: GB/s for memory, TFLOP/s for compute
    # The time below which the kernel cannot have done the work (Problem.floor_bytes): a cheat check.
    plausible_floor_ms: float | None = None

    @property
    def spread_fraction(self) -> float:
        return (self.p90_ms - self.p10_ms) / self.median_ms if self.median_ms else 0.0


@dataclass(frozen=True)
class Comparison:
    """Original against candidate, timed interleaved on the same fresh inputs."""

    baseline: TimingReport
    candidate: TimingReport
    speedup: float  # baseline median / candidate median
    ratio_ci: tuple[float, float]  # bootstrap 95% interval of the candidate/baseline time ratio
    faster: bool  # only when the whole interval lies below 1 - noise
    slower: bool
    decision: str  # how the verdict was reached, for a person
    timed_output_failures: tuple[CheckFailure, ...] = ()
    settled_early: bool = False  # stopped before the budget (a search's screening: TimeRequest.settle_early)


@dataclass(frozen=True)
class Ceilings:
    """Measured once per device and cached: what the roofline is drawn against."""

    copy_bandwidth_gbs: float
    flops_tflops: dict[str, float] = field(default_factory=dict)  # by dtype, e.g. {"float32": 50.8}


@dataclass(frozen=True)
class DeviceInfo:
    index: int
    name: str
    compute_capability: tuple[int, int]
    multiprocessors: int
    l2_bytes: int
    shared_bytes_per_block: int
    shared_bytes_per_block_optin: int
    memory_bytes: int
    driver_version: str
    runtime_version: str
    ceilings: Ceilings | None = None

    @property
    def arch(self) -> str:
        return f"sm_{self.compute_capability[0]}{self.compute_capability[1]}"


@dataclass(frozen=True)
class WorkerError:
    """The worker could not finish a request (timeout, crash, sticky CUDA error)."""

    kind: Literal["timeout", "crash", "cuda_error", "no_gpu", "bad_request"]
    message: str
    restarted: bool = False
