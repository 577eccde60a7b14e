"""What the LLM proposer accepts from the model: device code in place of the kernel, a launch in the spec's
terms; everything else refused with a message the model can act on (CPU only: parsing and NVRTC)."""

from __future__ import annotations

from pathlib import Path

import pytest
from cuda_agent.agent.llm.submission import Built, Submission, build_candidate, read_submission, refusals
from cuda_agent.agent.spec import LaunchSpec
from cuda_agent.agent.targets import KernelTarget, load_targets

from tests.llm_engine import baseline_of

ROOT = Path(__file__).resolve().parents[1]
SAXPY = """__global__ void saxpy(float a, const float* __restrict__ x, float* __restrict__ y, int n)
{
    int i = blockIdx.x * blockDim.x + threadIdx.x;
    if (i < n) y[i] = a * x[i] + y[i];
}"""
LAUNCH = LaunchSpec((128,), ("ceil_div(n, block.x)",))


@pytest.fixture(scope="module")
def target() -> KernelTarget:
    found = load_targets(ROOT / "examples" / "elementwise.cu").find("saxpy")
    assert found is not None
    return found


def test_device_code_in_place_of_the_kernel_passes(target: KernelTarget) -> None:
    helper = "__device__ float fma2(float a, float x, float y) { return a * x + y; }\n"
    assert refusals(helper + SAXPY.replace("a * x[i] + y[i]", "fma2(a, x[i], y[i])"), target) == []
    assert refusals("#include <cuda_fp16.h>\n#include <cooperative_groups.h>\n" + SAXPY, target) == []


@pytest.mark.parametrize(
    ("code", "says"),
    [
        ("#include <cstdio>\n" + SAXPY, "line 1: #include <cstdio> is refused"),
        (SAXPY + "\nint main() { return 0; }\n", "line 6: host code is refused"),
        (
            SAXPY.replace("if (i < n)", "other<<<1, 1>>>(x);\n    if (i < n)"),
            "kernel launches (<<<...>>>) are refused",
        ),
        (
            SAXPY.replace("if (i < n)", 'asm volatile("trap;");\n    if (i < n)'),
            "asm that traps or exits is refused",
        ),
        (SAXPY.replace("if (i < n)", "if (i == 0) __trap();\n    if (i < n)"), "__trap() is refused"),
        (SAXPY + "\n__global__ void helper(float* y) { y[0] = 0; }\n", "other __global__ functions (helper)"),
        (SAXPY.replace("void saxpy", "void saxpy2"), "other __global__ functions (saxpy2) are refused"),
        ("__device__ float twice(float v) { return 2 * v; }\n", "the code must define the kernel"),
        (SAXPY.replace("int n)", "long n)"), "the parameters of `saxpy` must stay (float a, const float* x"),
        (SAXPY.replace("float a,", "double a,"), "must stay"),
    ],
)
def test_what_the_engine_cannot_check_is_refused_with_a_reason(
    target: KernelTarget, code: str, says: str
) -> None:
    found = refusals(code, target)
    assert any(says in problem for problem in found), found


def test_tool_arguments_are_checked_for_shape() -> None:
    assert read_submission({"kernel_source": SAXPY}, LAUNCH) == Submission(SAXPY, LAUNCH, (), "")
    read = read_submission(
        {
            "kernel_source": SAXPY,
            "block": [256],
            "flags": ["--use_fast_math"],
            "description": " wider\nblocks ",
        },
        LAUNCH,
    )
    assert read == Submission(SAXPY, LaunchSpec((256,), LAUNCH.grid), ("--use_fast_math",), "wider blocks")
    problems = read_submission(
        {"block": "256", "grid": [], "shared_bytes": True, "flags": ["-Xcompiler", "--use_fast_math"]}, LAUNCH
    )
    assert isinstance(problems, list) and len(problems) == 5
    assert problems[0].startswith("`kernel_source` must be a string")
    assert "flags '-Xcompiler' are not allowed" in problems[4]


def test_a_candidate_is_the_users_file_with_the_kernel_and_its_launch_rewritten(tmp_path: Path) -> None:
    baseline = baseline_of(ROOT / "examples" / "elementwise.cu", "saxpy", tmp_path)
    launch = LaunchSpec((256,), ("ceil_div(n, block.x * 4)",))
    built = build_candidate(baseline, Submission(SAXPY, launch, (), "vectors"), "llm:m", 1)
    assert isinstance(built, Built)
    candidate = built.candidate
    assert candidate.proposer == "llm:m" and candidate.launch == launch and candidate.block == (256,)
    assert candidate.description == "LLM: vectors; block [256]"
    # The file re-reads with the launch it is verified with, and the kernel replaced where it was.
    reread = load_targets(baseline.target.path, candidate.source).find("saxpy")
    assert reread is not None and reread.spec is not None and reread.spec.launch == launch
    assert candidate.source.splitlines()[built.first_line - 1] == SAXPY.splitlines()[0]
    assert "relu" in candidate.source  # the rest of the file is kept

    same = build_candidate(baseline, Submission(SAXPY, baseline.spec.launch, (), ""), "llm:m", 2)
    assert isinstance(same, Built) and same.candidate.launch is None  # the spec's own launch: not rewritten


def test_a_launch_the_spec_cannot_run_is_refused(tmp_path: Path) -> None:
    baseline = baseline_of(ROOT / "examples" / "elementwise.cu", "saxpy", tmp_path)
    too_big = build_candidate(
        baseline, Submission(SAXPY, LaunchSpec((2048,), LAUNCH.grid), (), ""), "llm:m", 1
    )
    assert isinstance(too_big, list) and "2048 is outside [1, 1024]" in too_big[0]
    division = build_candidate(
        baseline, Submission(SAXPY, LaunchSpec((256,), ("n / block.x",)), (), ""), "llm:m", 1
    )
    assert isinstance(division, list) and "'/' is not allowed: use // for integer division" in division[0]
