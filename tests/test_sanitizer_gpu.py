"""The compute-sanitizer gate on a real GPU with the real tool: a clean kernel passes all four tools, and each
tool rejects the bug it is for at the line it is on (racecheck a missing __syncthreads, memcheck a write a
few elements past a buffer, synccheck a __syncthreads divergent within a warp, initcheck a read of an output
never written). The seconds each tool took on three kernels are recorded for the closing note (printed, and
in $OUT/figures.txt). Problems and launches are built by hand; the engine's path (compiling a candidate
again with -lineinfo) is checked once on examples/elementwise.cu."""

from __future__ import annotations

from pathlib import Path

import pytest
from cuda_agent.sandbox.client import Sandbox
from cuda_agent.sandbox.compile import compile_kernel
from cuda_agent.sandbox.plan import ArgumentPlan, Distribution, LaunchPlan, Problem, Tolerance
from cuda_agent.sandbox.sanitizer import (
    TOOLS,
    SanitizerReport,
    SanitizerRequest,
    find_compute_sanitizer,
    sanitize,
)

from tests.test_adversarial_gpu import record

pytestmark = [
    pytest.mark.gpu,
    pytest.mark.skipif(find_compute_sanitizer() is None, reason="compute-sanitizer is not installed"),
]

FILENAME = "/work/sanitizer_kernels.cu"  # reports print its base name; lines are this text's
KERNELS = """\
extern "C" __global__ void twice(const float* x, float* y, int n) {
    int i = blockIdx.x * blockDim.x + threadIdx.x;
    if (i < n) y[i] = 2.0f * x[i];
}
extern "C" __global__ void past_the_end(const float* x, float* y, int n) {
    int i = blockIdx.x * blockDim.x + threadIdx.x;
    if (i < n + 3) y[i] = 2.0f * x[i < n ? i : 0];
}
extern "C" __global__ void neighbour_race(const float* x, float* y, int n) {
    __shared__ float tile[256];
    int i = blockIdx.x * blockDim.x + threadIdx.x;
    tile[threadIdx.x] = i < n ? x[i] : 0.0f;
    // no __syncthreads() between the write above and the neighbour's read below
    if (i < n) y[i] = tile[(threadIdx.x + 1) % blockDim.x];
}
extern "C" __global__ void split_barrier(const float* x, float* y, int n) {
    __shared__ float tile[256];
    int i = blockIdx.x * blockDim.x + threadIdx.x;
    tile[threadIdx.x] = i < n ? x[i] : 0.0f;
    if (threadIdx.x % 32 < 16) __syncthreads();
    if (i < n) y[i] = tile[threadIdx.x];
}
extern "C" __global__ void read_before_write(const float* x, float* y, int n) {
    int i = blockIdx.x * blockDim.x + threadIdx.x;
    if (i < n) y[i] = y[i] + x[i];
}
extern "C" __global__ void neighbour_synced(const float* x, float* y, int n) {
    __shared__ float tile[256];
    int i = blockIdx.x * blockDim.x + threadIdx.x;
    tile[threadIdx.x] = i < n ? x[i] : 0.0f;
    __syncthreads();
    if (i < n) y[i] = tile[(threadIdx.x + 1) % blockDim.x];
}
#define TILE 16
extern "C" __global__ void matmul_tiled(const float* a, const float* b, float* c, int n) {
    __shared__ float as[TILE][TILE], bs[TILE][TILE];
    int row = blockIdx.y * TILE + threadIdx.y, col = blockIdx.x * TILE + threadIdx.x;
    float sum = 0.0f;
    for (int t = 0; t < n; t += TILE) {
        as[threadIdx.y][threadIdx.x] = row < n && t + threadIdx.x < n ? a[row * n + t + threadIdx.x] : 0.0f;
        bs[threadIdx.y][threadIdx.x] = col < n && t + threadIdx.y < n ? b[(t + threadIdx.y) * n + col] : 0.0f;
        __syncthreads();
        for (int k = 0; k < TILE; ++k) sum += as[threadIdx.y][k] * bs[k][threadIdx.x];
        __syncthreads();
    }
    if (row < n && col < n) c[row * n + col] = sum;
}
"""


def line_of(text: str) -> int:
    return next(i for i, line in enumerate(KERNELS.split("\n"), 1) if text in line)


def vector_problem(n: int) -> Problem:
    arguments = (
        ArgumentPlan("x", "input", "float32", (n,)),
        ArgumentPlan("y", "output", "float32", (n,)),
        ArgumentPlan("n", "scalar", "int32", (), Distribution("value", value=n)),
    )
    return Problem(f"n={n}", {"n": n}, arguments, {"y": Tolerance.default("float32")})


def matmul_problem(n: int) -> Problem:
    arguments = (
        ArgumentPlan("a", "input", "float32", (n, n)),
        ArgumentPlan("b", "input", "float32", (n, n)),
        ArgumentPlan("c", "output", "float32", (n, n)),
        ArgumentPlan("n", "scalar", "int32", (), Distribution("value", value=n)),
    )
    return Problem(f"n={n}", {"n": n}, arguments, {"c": Tolerance.default("float32", reduction_length=n)})


VECTOR_SIZES = (1_048_576, 1_001)  # a benchmark size and an odd one (memcheck and initcheck run both)


def vector_request(name: str) -> SanitizerRequest:
    result = compile_kernel(KERNELS, name, filename=FILENAME, arch="sm_90", flags=("-lineinfo",))
    assert result.ok and result.kernel is not None, [d.message for d in result.diagnostics]
    problems = tuple(vector_problem(n) for n in VECTOR_SIZES)
    launches = tuple(LaunchPlan((-(-n // 256), 1, 1), (256, 1, 1)) for n in VECTOR_SIZES)
    return SanitizerRequest(result.kernel, problems, launches, KERNELS, FILENAME)


def matmul_request() -> SanitizerRequest:
    result = compile_kernel(KERNELS, "matmul_tiled", filename=FILENAME, arch="sm_90", flags=("-lineinfo",))
    assert result.ok and result.kernel is not None, [d.message for d in result.diagnostics]
    sizes = (512, 129)
    problems = tuple(matmul_problem(n) for n in sizes)
    launches = tuple(LaunchPlan((-(-n // 16), -(-n // 16), 1), (16, 16, 1)) for n in sizes)
    return SanitizerRequest(result.kernel, problems, launches, KERNELS, FILENAME)


def checked(sandbox: Sandbox, request: SanitizerRequest) -> SanitizerReport:
    with sandbox.exclusive():  # as the engine runs it: no verify or time request beside it
        report = sanitize(request)
    print(report.summary(), *report.notes, sep="\n  ")
    return report


def test_a_clean_kernel_passes_all_four_tools(sandbox: Sandbox) -> None:
    report = checked(sandbox, vector_request("twice"))
    assert report.status == "passed", report
    assert [run.tool for run in report.runs] == list(TOOLS)
    by_tool = {run.tool: run.problems for run in report.runs}
    assert by_tool["racecheck"] == by_tool["synccheck"] == ("n=1001",)
    assert by_tool["memcheck"] == by_tool["initcheck"] == ("n=1001", "n=1048576")


@pytest.mark.parametrize(
    ("kernel", "tool", "kind", "line"),
    [
        ("neighbour_race", "racecheck", "race", "tile[threadIdx.x] = i < n ? x[i] : 0.0f;"),
        ("past_the_end", "memcheck", "out_of_bounds", "if (i < n + 3)"),
        ("split_barrier", "synccheck", "barrier", "if (threadIdx.x % 32 < 16) __syncthreads();"),
        ("read_before_write", "initcheck", "uninitialized", "y[i] = y[i] + x[i];"),
    ],
)
def test_each_tool_rejects_its_bug_at_its_line(
    sandbox: Sandbox, kernel: str, tool: str, kind: str, line: str
) -> None:
    report = checked(sandbox, vector_request(kernel))
    assert report.status == "rejected", report.summary()
    assert report.runs[-1].tool == tool and report.runs[-1].outcome == "findings", report.runs
    assert all(run.outcome == "clean" for run in report.runs[:-1]), report.runs  # no earlier tool objects
    finding = report.findings[0]
    assert finding.tool == tool and finding.kind == kind, finding
    expected = line_of(line)  # the first kernel with that line is the one under test
    assert finding.line == expected, finding
    assert finding.source_line == KERNELS.split("\n")[expected - 1].strip()
    if kernel == "neighbour_race":  # the race's other side: the neighbour's read
        assert line_of("y[i] = tile[(threadIdx.x + 1) % blockDim.x]") in finding.other_lines, finding
    record(f"sanitizer rejects {kernel}: {report.summary()}")


def test_the_cost_of_the_gate_on_three_kernels(sandbox: Sandbox) -> None:
    for name, request in (
        ("twice (1-D element-wise)", vector_request("twice")),
        ("neighbour_synced (shared tile, one barrier)", vector_request("neighbour_synced")),
        ("matmul_tiled (16x16 shared tiles)", matmul_request()),
    ):
        report = checked(sandbox, request)
        assert report.status == "passed", report.summary()
        record(f"sanitizer cost, {name}: {report.costs()}; {report.seconds:.1f} s wall, side by side")


def test_the_engine_checks_a_candidate_compiled_again_with_lineinfo() -> None:
    from cuda_agent.agent.candidates import Candidate
    from cuda_agent.agent.engine import Engine, EngineSettings
    from cuda_agent.agent.targets import load_targets

    path = Path(__file__).resolve().parents[1] / "examples" / "elementwise.cu"
    text = path.read_text()
    target = load_targets(path, text).find("saxpy")
    assert target is not None
    with Engine(EngineSettings(use_cache=False)) as engine:
        baseline = engine.baseline(target)
        assert baseline.usable, baseline
        candidate = Candidate(text.replace("block = [128]", "block = [256]"), (256,), "block 256", "test")
        (result,) = engine.evaluate(baseline, [candidate])
        assert result.verified, result.reason
        report = engine.sanitize(baseline, result)
    assert report.status == "passed", report.summary()
    record(f"sanitizer on saxpy block 256 through the engine: {report.summary()}")
