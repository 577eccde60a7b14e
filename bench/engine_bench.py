"""Engine figures on a real GPU: compile time, verify + time of a ~1 ms kernel, timing repeatability,
worker restart after a crash. Prints a table; run on the GPU machine:

    python bench/engine_bench.py
"""

from __future__ import annotations

import statistics
import tempfile
import time
from pathlib import Path

from cuda_agent.agent.cache import ResultCache
from cuda_agent.agent.engine import Engine, EngineSettings
from cuda_agent.agent.proposers.launch_config import propose_launch_configs
from cuda_agent.agent.targets import load_targets
from cuda_agent.sandbox.compile import compile_kernel
from cuda_agent.sandbox.plan import (
    ArgumentPlan,
    Distribution,
    KernelUnderTest,
    LaunchPlan,
    Problem,
    Tolerance,
)
from cuda_agent.sandbox.protocol import TimeRequest, VerifyRequest
from cuda_agent.sandbox.reports import WorkerError
from rich.console import Console
from rich.table import Table

HERE = Path(__file__).resolve().parent
CRASH_AND_COPY = """
extern "C" __global__ void crash(const float* x, float* y, int n)
{
    int i = blockIdx.x * blockDim.x + threadIdx.x;
    if (i < n) ((float*)0x10)[i] = x[i];
}
extern "C" __global__ void copy(const float* x, float* y, int n)
{
    int i = blockIdx.x * blockDim.x + threadIdx.x;
    if (i < n) y[i] = x[i];
}
"""


def main() -> None:
    console = Console()
    rows: list[tuple[str, str, str]] = []
    target = load_targets(HERE / "kernels" / "matmul_naive.cu").find("matmul")
    assert target is not None and target.spec is not None
    with (
        tempfile.TemporaryDirectory() as cache_dir,
        Engine(EngineSettings(), ResultCache(Path(cache_dir), enabled=False)) as engine,
    ):
        device = engine.device()
        if isinstance(device, WorkerError):
            raise SystemExit(device.message)
        rows.append(("GPU", device.name, ""))

        # Compile: every launch-config candidate of every example, through the engine's path.
        candidates = propose_launch_configs(target)
        seconds = [engine.compile(target, c.source, c).seconds for c in candidates]
        rows.append(
            ("compile per candidate (NVRTC), median", f"{statistics.median(seconds):.3f} s", "≤ 0.15 s")
        )

        # Verify + time of the ~1 ms kernel: the original's full baseline, uncached. The first one in a
        # worker pays for importing torch (the oracle is a PyTorch expression); the second is steady state.
        cold_start = time.perf_counter()
        engine.baseline(target)
        cold = time.perf_counter() - cold_start
        start = time.perf_counter()
        baseline = engine.baseline(target)
        warm = time.perf_counter() - start
        assert baseline.timing is not None and baseline.kernel is not None, baseline
        rows.append(("1 ms kernel: median time", f"{baseline.timing.median_ms:.3f} ms", ""))
        rows.append(("1 ms kernel: compile + verify + time, warm worker", f"{warm:.2f} s", "≤ 2 s"))
        rows.append(("  the same, first in a worker (imports torch)", f"{cold:.2f} s", ""))
        sandbox = engine.executor
        kernel = baseline.kernel
        start = time.perf_counter()
        report = sandbox.verify(VerifyRequest(kernel, baseline.problems, None))
        verify_s = time.perf_counter() - start
        passed = getattr(report, "passed", report)
        rows.append(
            (f"  of which verify (5 sets × {len(baseline.problems)} sizes)", f"{verify_s:.2f} s", f"{passed}")
        )
        first = KernelUnderTest(kernel.compiled, kernel.launches[:1], label="original")
        start = time.perf_counter()
        timed = [sandbox.time(TimeRequest((first,), baseline.problems[0])) for _ in range(2)]
        time_s = (time.perf_counter() - start) / 2
        rows.append(("  of which one timing", f"{time_s:.2f} s", ""))
        medians = [t.reports[0].median_ms for t in timed if not isinstance(t, WorkerError)]
        drift = abs(medians[0] - medians[1]) / min(medians)
        rows.append(
            (
                "same kernel timed twice",
                f"{medians[0]:.4f} / {medians[1]:.4f} ms",
                f"{drift:.2%} apart (≤ 2%)",
            )
        )

        # Restart after an illegal address: from the error to the next request served, by a request that
        # needs no PyTorch (checked against a reference kernel), so the figure is the worker's own.
        n = 1 << 20
        arguments = (
            ArgumentPlan("x", "input", "float32", (n,)),
            ArgumentPlan("y", "output", "float32", (n,)),
            ArgumentPlan("n", "scalar", "int32", (), Distribution("value", value=n)),
        )
        problem = Problem(f"n={n}", {"n": n}, arguments, {"y": Tolerance.default("float32")})
        launch = (LaunchPlan((n // 256, 1, 1), (256, 1, 1)),)
        crash, copy = (
            compile_kernel(CRASH_AND_COPY, name, arch=engine.arch).kernel for name in ("crash", "copy")
        )
        assert crash is not None and copy is not None
        reference = KernelUnderTest(copy, launch, label="copy")
        warm_up = sandbox.verify(VerifyRequest(reference, (problem,), reference, input_sets=1))
        time.sleep(1.0)  # the standby worker starts beside the busy one
        outcome = sandbox.verify(VerifyRequest(KernelUnderTest(crash, launch), (problem,), reference))
        start = time.perf_counter()
        again = sandbox.verify(VerifyRequest(reference, (problem,), reference, input_sets=1))
        restart_s = time.perf_counter() - start
        said = (
            f"{outcome.kind}: {outcome.message[:40]}"
            if isinstance(outcome, WorkerError)
            else repr(outcome)[:60]
        )
        rows.append(("crash reported as", said, f"warm-up {getattr(warm_up, 'passed', warm_up)}"))
        served = "served" if not isinstance(again, WorkerError) else again.message
        rows.append(("restart + next request served", f"{restart_s:.2f} s", f"≤ 3 s; {served}"))

    table = Table(title="engine benchmark")
    for column in ("measure", "value", "target / note"):
        table.add_column(column)
    for row in rows:
        table.add_row(*row)
    console.print(table)


if __name__ == "__main__":
    main()
