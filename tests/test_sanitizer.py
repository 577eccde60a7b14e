"""The compute-sanitizer gate on a CPU: its output parser on each tool's reports (clean and with findings, in
the format of NVIDIA's manual and of the H200 runs), the mapping to the compiled text's lines, the runner's
request round trip, the sizes each tool runs, the judgement of a run from its exit status, the whole
caller side against a stand-in executable, and the gate's choice of the next best."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import textwrap
import time
from dataclasses import replace
from pathlib import Path

import pytest
from cuda_agent.agent.candidate_log import CandidateLog
from cuda_agent.agent.candidates import Candidate, CandidateResult
from cuda_agent.agent.sanitizer_gate import SanitizerGate
from cuda_agent.sandbox.plan import ArgumentPlan, CompiledKernel, Distribution, LaunchPlan, Problem, Tolerance
from cuda_agent.sandbox.reports import Comparison, CompileResult, TimingReport, VerificationReport
from cuda_agent.sandbox.sanitizer import (
    ERROR_EXIT_CODE,
    SANITIZER_ENV,
    TOOLS,
    ProcessOutput,
    SanitizerReport,
    SanitizerRequest,
    SanitizerSettings,
    find_compute_sanitizer,
    judge,
    map_to_source,
    not_checked,
    parse_output,
    problems_for_tool,
    read_tool_output,
    sanitize,
    tool_command,
)
from cuda_agent.sandbox.sanitizer_run import SanitizerLaunch, main, read_request, write_request

# The kernels of the H200 exploration (compiled there with -lineinfo from san_kernels.cu).
SAN_KERNELS = """\
extern "C" __global__ void clean(const float* x, float* y, int n) {
    int i = blockIdx.x * blockDim.x + threadIdx.x;
    if (i < n) y[i] = 2.0f * x[i];
}
extern "C" __global__ void oob(const float* x, float* y, int n) {
    int i = blockIdx.x * blockDim.x + threadIdx.x;
    if (i <= n + 100000) y[i] = 2.0f * x[i < n ? i : 0];
}
extern "C" __global__ void shared_race(const float* x, float* y, int n) {
    __shared__ float tile[256];
    int i = blockIdx.x * blockDim.x + threadIdx.x;
    tile[threadIdx.x] = i < n ? x[i] : 0.0f;
    // missing __syncthreads()
    if (i < n) y[i] = tile[(threadIdx.x + 1) % 256];
}
extern "C" __global__ void divergent_sync(const float* x, float* y, int n) {
    __shared__ float tile[256];
    int i = blockIdx.x * blockDim.x + threadIdx.x;
    tile[threadIdx.x] = i < n ? x[i] : 0.0f;
    if (threadIdx.x < 128) __syncthreads();
    if (i < n) y[i] = tile[threadIdx.x];
}
"""
FILE = "/home/me/project/san_kernels.cu"

# As racecheck printed it on the H200 (compute-sanitizer 2025.3.1), the program's own line interleaved.
RACECHECK_RACE = """\
========= COMPUTE-SANITIZER
========= Error: Race reported between Write access at shared_race+0x100 in san_kernels.cu:12
=========     and Read access at shared_race+0x150 in san_kernels.cu:14 [400000 hazards]
=========\x20
launched shared_race 0.43s
========= RACECHECK SUMMARY: 1 hazard displayed (1 error, 0 warnings)
"""
RACECHECK_CLEAN = """\
========= COMPUTE-SANITIZER
cuda-agent sanitizer run: n=333: launched grid (2, 1, 1) block (256, 1, 1) in 0.41 s
========= RACECHECK SUMMARY: 0 hazards displayed (0 errors, 0 warnings)
"""
# memcheck as the manual documents it: one report per thread, host backtraces, the API error that follows.
MEMCHECK_OUT_OF_BOUNDS = """\
========= COMPUTE-SANITIZER
========= Invalid __global__ write of size 4 bytes
=========     at oob+0x70 in san_kernels.cu:7
=========     by thread (255,0,0) in block (390,0,0)
=========     Address 0x7f1c2a0186a0 is out of bounds
=========     and is 16 bytes after the nearest allocation at 0x7f1c2a000000 of size 100000 bytes
=========     Saved host backtrace up to driver entry point at kernel launch time
=========         Host Frame: main in driver.cu:25 [0x8a81] in python
=========\x20
========= Invalid __global__ write of size 4 bytes
=========     at oob+0x70 in san_kernels.cu:7
=========     by thread (0,0,0) in block (391,0,0)
=========     Address 0x7f1c2a0186a4 is out of bounds
=========     and is 20 bytes after the nearest allocation at 0x7f1c2a000000 of size 100000 bytes
=========\x20
========= Program hit cudaErrorLaunchFailure (error 719) due to "unspecified launch failure" on CUDA API \
call to cuStreamSynchronize.
cuda-agent sanitizer run: n=25000: the launch failed: cudaErrorLaunchFailure
========= ERROR SUMMARY: 3 errors
"""
MEMCHECK_CLEAN = """\
========= COMPUTE-SANITIZER
cuda-agent sanitizer run: n=333: launched grid (2, 1, 1) block (256, 1, 1) in 0.02 s
========= ERROR SUMMARY: 0 errors
"""
SYNCCHECK_DIVERGENT = """\
========= COMPUTE-SANITIZER
========= Barrier error detected. Divergent thread(s) in warp
=========     at divergent_sync+0xf0 in san_kernels.cu:20
=========     by thread (37,0,0) in block (0,0,0)
=========\x20
========= ERROR SUMMARY: 1 error
"""
SYNCCHECK_CLEAN = MEMCHECK_CLEAN
INITCHECK_UNINITIALIZED = """\
========= COMPUTE-SANITIZER
========= Uninitialized __global__ memory read of size 4 bytes
=========     at shared_race(const float *, float *, int)+0x70 in /home/me/project/san_kernels.cu:14
=========     by thread (31,0,0) in block (1,0,0)
=========     Address 0x7f3c7ec000fc
=========\x20
========= ERROR SUMMARY: 1 error
"""
INITCHECK_CLEAN = MEMCHECK_CLEAN


def test_racecheck_finding_is_mapped_to_its_line_with_the_other_access():
    parsed = parse_output("racecheck", RACECHECK_RACE, FILE)
    (race,) = [map_to_source(f, SAN_KERNELS) for f in parsed.findings]
    assert (race.tool, race.kind, race.line, race.other_lines) == ("racecheck", "race", 12, (14,))
    assert race.source_line == "tile[threadIdx.x] = i < n ? x[i] : 0.0f;"
    assert race.message.startswith("Error: Race reported between Write access at shared_race+0x100")
    assert "[400000 hazards]" in race.message and "launched" not in race.message  # the program's line
    assert (parsed.summary, parsed.error_count) == (
        "RACECHECK SUMMARY: 1 hazard displayed (1 error, 0 warnings)",
        1,
    )
    assert race.describe(" of the rewrite").endswith(
        "; line 12 of the rewrite: tile[threadIdx.x] = i < n ? x[i] : 0.0f;"
    )


@pytest.mark.parametrize(
    ("tool", "output"),
    [
        ("memcheck", MEMCHECK_CLEAN),
        ("racecheck", RACECHECK_CLEAN),
        ("synccheck", SYNCCHECK_CLEAN),
        ("initcheck", INITCHECK_CLEAN),
    ],
)
def test_clean_runs_have_no_findings_and_a_zero_count(tool: str, output: str):
    parsed = parse_output(tool, output, FILE)
    assert parsed.findings == [] and parsed.unknown == [] and parsed.notes == []
    assert parsed.error_count == 0
    run, findings, _ = read_tool_output(tool, ProcessOutput(output, 0, 1.5, False), ("n=333",), SAN_KERNELS,
                                        FILE, 60)  # fmt: skip
    assert (run.outcome, run.findings, findings) == ("clean", 0, [])


def test_memcheck_reports_of_many_threads_are_one_finding_and_host_frames_are_not_lines():
    parsed = parse_output("memcheck", MEMCHECK_OUT_OF_BOUNDS, FILE)
    (write,) = parsed.findings
    assert (write.kind, write.line, write.count, write.other_lines) == ("out_of_bounds", 7, 2, ())
    assert "by thread (255,0,0) in block (390,0,0)" in write.message
    assert "Host Frame" not in write.message and "driver.cu" not in write.message
    assert parsed.api_errors == 1 and parsed.notes[0].startswith("Program hit cudaErrorLaunchFailure")
    assert parsed.error_count == 3
    mapped = map_to_source(write, SAN_KERNELS)
    assert mapped.source_line == "if (i <= n + 100000) y[i] = 2.0f * x[i < n ? i : 0];"
    # The runner exits 3 after the failed launch; the finding, not the exit status, decides.
    run, findings, notes = read_tool_output(
        "memcheck", ProcessOutput(MEMCHECK_OUT_OF_BOUNDS, 3, 2.0, False), ("n=25000",), SAN_KERNELS, FILE, 60
    )
    assert run.outcome == "findings" and [f.line for f in findings] == [7]
    assert notes == ["memcheck: " + parsed.notes[0]]


def test_synccheck_and_initcheck_findings():
    (barrier,) = parse_output("synccheck", SYNCCHECK_DIVERGENT, FILE).findings
    assert (barrier.kind, barrier.line) == ("barrier", 20)
    assert map_to_source(barrier, SAN_KERNELS).source_line == "if (threadIdx.x < 128) __syncthreads();"
    (read,) = parse_output("initcheck", INITCHECK_UNINITIALIZED, FILE).findings
    assert (read.kind, read.line) == ("uninitialized", 14)  # the full path printed: the base name matches
    assert read.message.startswith("Uninitialized __global__ memory read of size 4 bytes at shared_race(")


def test_other_layouts_of_the_reports():
    # The manual's examples as rendered (the indentation lost), an older kit's "file:line:function".
    flat = (
        "========= Invalid __global__ write of size 4 bytes\n"
        "========= at unaligned_kernel():0x160 in memcheck_demo.cu:6\n"
        "========= by thread (0,0,0) in block (0,0,0)\n"
        "========= Address 0x7f6510c00001 is misaligned\n"
    )
    (misaligned,) = parse_output("memcheck", flat, "memcheck_demo.cu").findings
    assert (misaligned.kind, misaligned.line, misaligned.count) == ("misaligned", 6, 1)
    older = (
        "========= CUDA-MEMCHECK\n"
        "========= Barrier error detected. Divergent thread(s) in block\n"
        "=========     at 0x000008f0 in /home/training2/cuda/syncthreads.cu:20:globFunction(int*)\n"
        "=========     by thread (63,0,0) in block (0,0,0)\n"
    )
    (old,) = parse_output("synccheck", older, "syncthreads.cu").findings
    assert (old.line, old.column) == (20, None)
    # A barrier inside an outlined clone, with the device frame of the kernel that called it.
    clone = (
        "========= Barrier error detected. Divergent thread(s) in block.\n"
        "=========     at [clone myKernel(int *, int *)] outlineSync()+0x11f0 in test.cu:42\n"
        "=========     by thread (32,0,0) in block (0,0,0)\n"
        "=========     Device Frame: myKernel(int *, int *)+0xe40 in test.cu:60\n"
    )
    (cloned,) = parse_output("synccheck", clone, "/src/test.cu").findings
    assert (cloned.line, cloned.other_lines) == (42, (60,))
    # A finding inside a CUDA header, called from the user's kernel; and one nowhere in the user's file.
    header = (
        "========= Barrier error detected. Invalid arguments\n"
        "=========     at __cuda_sm70_warpsync+0x30\n"
        "=========     by thread (0,0,0) in block (0,0,0)\n"
        "=========     Device Frame:__syncwarp(unsigned int)+0xf0 in "
        "/usr/local/cuda/include/sm_30_intrinsics.hpp:110\n"
        "=========     Device Frame:myKernel(int *)+0x3c0 in /home/cuda/illegal_syncwarp.cu:48\n"
    )
    (syncwarp,) = parse_output("synccheck", header, "illegal_syncwarp.cu").findings
    assert (syncwarp.line, syncwarp.file) == (48, None)
    (elsewhere,) = parse_output("synccheck", header, "other.cu").findings
    assert elsewhere.line is None and elsewhere.file == "/usr/local/cuda/include/sm_30_intrinsics.hpp:110"
    assert elsewhere.describe().endswith("; in /usr/local/cuda/include/sm_30_intrinsics.hpp:110")
    # A file name with a space; a racecheck hazard report (hazard mode) with its two threads.
    spaced = "========= Error: Race reported between Write access at k+0x10 in my kernels.cu:3\n"
    assert parse_output("racecheck", spaced, "/tmp/my kernels.cu").findings[0].line == 3
    hazard = (
        "========= Warning: (Warp Level Programming) Potential RAW hazard detected at __shared__ 0x8c in "
        "block (0,0,0) :\n"
        "=========     Write Thread (35,0,0) at sumKernel(int *, int *)+0x90 in warp_error.cu:44\n"
        "=========     Read Thread (32,0,0) at sumKernel(int *, int *)+0x120 in warp_error.cu:56\n"
        "=========     Current Value : 35\n"
    )
    (warp,) = parse_output("racecheck", hazard, "warp_error.cu").findings
    assert (warp.kind, warp.line, warp.other_lines) == ("race", 44, (56,))


def test_how_a_run_is_judged_from_its_exit_status():
    def judged(text: str, code: int | None, timed_out: bool = False):
        output = ProcessOutput(text, code, 1.0, timed_out)
        return read_tool_output("memcheck", output, ("n=333",), SAN_KERNELS, FILE, 60)

    # Errors counted, but only CUDA API errors (a driver probe of CuPy's, say): nothing in the kernel.
    api_only = (
        '========= Program hit CUDA_ERROR_NOT_FOUND (error 500) due to "named symbol not found" on CUDA API '
        "call to cuGetProcAddress.\n========= ERROR SUMMARY: 1 error\n"
    )
    run, findings, notes = judged(api_only, ERROR_EXIT_CODE)
    assert (run.outcome, findings) == ("clean", []) and "1 CUDA API error(s)" in run.message
    assert notes and notes[0].startswith("memcheck: Program hit CUDA_ERROR_NOT_FOUND")
    # A report of a kind not known here counts where the tool counted errors, not otherwise.
    novel = (
        "========= Tensor Memory column 32 being accessed is not allocated.\n"
        "=========     at k+0x12 in san_kernels.cu:3\n"
    )
    run, findings, _ = judged(novel + "========= ERROR SUMMARY: 1 error\n", ERROR_EXIT_CODE)
    assert run.outcome == "findings" and (findings[0].kind, findings[0].line) == ("other", 3)
    run, findings, _ = judged(novel + "========= ERROR SUMMARY: 0 errors\n", 0)
    assert (run.outcome, findings) == ("clean", [])
    # Errors counted and nothing readable: rejected, not passed.
    run, findings, _ = judged("========= ERROR SUMMARY: 2 errors\n", ERROR_EXIT_CODE)
    assert run.outcome == "findings" and "cannot read" in findings[0].message
    # The runner failed without a finding, or the tool hung: not checked, and it says why.
    run, findings, _ = judged("Traceback (most recent call last):\nImportError: no cupy\n", 1)
    assert run.outcome == "failed" and "exit status 1" in run.message and "ImportError" in run.message
    report = judge([run], findings, [], "/opt/cs")
    assert report.status == "not_checked" and report.reason.startswith("memcheck could not run")
    run, _, _ = judged("", None, timed_out=True)
    assert (run.outcome, run.message) == ("timeout", "timed out after 60 s")
    assert (
        judge([run], [], [], "x")
        .summary()
        .startswith(
            "not checked by compute-sanitizer: memcheck timed out after 60 s (memcheck timeout 1.0 s (n=333))"
        )
    )


def test_reports_say_what_was_checked_and_what_it_cost():
    assert not_checked("not found").summary() == "not checked by compute-sanitizer: not found"
    runs = [
        read_tool_output(t, ProcessOutput(MEMCHECK_CLEAN, 0, 1.25, False), ("n=333",), "", FILE, 60)[0]
        for t in TOOLS
    ]
    passed = judge(runs, [], [], "/usr/local/cuda/bin/compute-sanitizer")
    assert passed.passed and passed.seconds == pytest.approx(5.0)
    assert passed.summary() == (
        "checked by compute-sanitizer, no findings: memcheck 1.2 s (n=333), racecheck 1.2 s (n=333), "
        "synccheck 1.2 s (n=333), initcheck 1.2 s (n=333) (side by side, 5.0 s)"
    )
    race = parse_output("racecheck", RACECHECK_RACE, FILE).findings
    rejected = judge(runs[:2], [map_to_source(f, SAN_KERNELS) for f in race], [], "x")
    assert rejected.rejected and rejected.summary(" of the rewrite").startswith(
        "rejected by compute-sanitizer racecheck: Error: Race reported between"
    )


# -- which sizes, the command, the runner's request ----------------------------------------------------


def vector_problem(n: int) -> Problem:
    arguments = (
        ArgumentPlan("x", "input", "float32", (n,)),
        ArgumentPlan("y", "output", "float32", (n,)),
        ArgumentPlan("n", "scalar", "int32", (), Distribution("value", value=n)),
    )
    return Problem(f"n={n}", {"n": n}, arguments, {"y": Tolerance.default("float32")})


KERNEL = CompiledKernel("shared_race", "shared_race", b"\x7fELF not really", "nvrtc", "sm_90", ("-lineinfo",))
PROBLEMS = (vector_problem(16_777_216), vector_problem(1_000_003), vector_problem(333))
LAUNCHES = tuple(LaunchPlan((-(-p.sizes["n"] // 256), 1, 1), (256, 1, 1)) for p in PROBLEMS)


def test_each_tool_runs_the_sizes_it_needs():
    settings = SanitizerSettings()
    assert problems_for_tool("racecheck", PROBLEMS, settings) == (2,)  # the smallest only
    assert problems_for_tool("synccheck", PROBLEMS, settings) == (2,)
    # memcheck and initcheck: every size up to the element cap (2 x 16M elements is above it), smallest first
    assert problems_for_tool("memcheck", PROBLEMS, settings) == (2, 1)
    assert problems_for_tool("initcheck", PROBLEMS, replace(settings, memory_check_max_elements=10)) == (2,)
    assert problems_for_tool("memcheck", PROBLEMS, replace(settings, memory_check_max_elements=1 << 26)) == (
        2, 1, 0,
    )  # fmt: skip


def test_the_command_checks_only_the_kernel_and_runs_the_runner():
    command = tool_command(
        "/cuda/bin/compute-sanitizer", "memcheck", "/tmp/r.pickle", "_Z3fooPf", SanitizerSettings()
    )
    assert command[:3] == ["/cuda/bin/compute-sanitizer", "--tool", "memcheck"]
    assert " --kernel-name kne=_Z3fooPf " in " ".join(command)
    assert f" --error-exitcode {ERROR_EXIT_CODE} " in " ".join(command)
    assert " --padding 65536 " in " ".join(command)
    assert command[-4:] == [sys.executable, "-m", "cuda_agent.sandbox.sanitizer_run", "/tmp/r.pickle"]
    racecheck = tool_command("cs", "racecheck", "r", "k", SanitizerSettings())
    assert "--padding" not in racecheck and "--xml" not in racecheck


def test_the_runners_request_round_trips_through_its_file(tmp_path: Path):
    launch = SanitizerLaunch(KERNEL, tuple(zip(LAUNCHES, PROBLEMS, strict=True)), gpu_index=1, seed=7,
                             poison_outputs=False)  # fmt: skip
    path = tmp_path / "request.pickle"
    write_request(path, launch)
    assert read_request(path) == launch
    # What cannot be read is refused with exit status 2, before CuPy is imported (none here).
    (tmp_path / "garbage").write_bytes(b"not a pickle")
    assert main([str(tmp_path / "garbage")]) == 2
    assert main([]) == 2


def test_the_runner_reads_its_request_when_run_as_a_module(tmp_path: Path):
    """As compute-sanitizer starts it (`python -m ...`): the module is then `__main__`, and a request
    pickled as cuda_agent.sandbox.sanitizer_run.SanitizerLaunch once failed to read there."""
    launch = SanitizerLaunch(KERNEL, tuple(zip(LAUNCHES, PROBLEMS, strict=True)), gpu_index=0, seed=7)
    path = tmp_path / "request.pickle"
    write_request(path, launch)
    done = subprocess.run(
        [sys.executable, "-m", "cuda_agent.sandbox.sanitizer_run", str(path)],
        capture_output=True, text=True, timeout=60, check=False,
    )  # fmt: skip
    assert "cannot read" not in done.stderr, done.stderr
    assert done.returncode != 2  # read; what follows needs a GPU (here CuPy is missing, or no device)


# -- the caller's side, against a stand-in for compute-sanitizer ---------------------------------------

FAKE = """\
#!{python}
import json, os, pickle, sys, time
args = sys.argv[1:]
if args == ["--version"]:
    print("NVIDIA (R) Compute Sanitizer\\nVersion 2025.3.1.0 (stand-in)")
    sys.exit(0)
tool = args[args.index("--tool") + 1]
launch = pickle.loads(open(args[-1], "rb").read())  # the runner's request, as the runner would read it
with open(os.environ["FAKE_SANITIZER_LOG"], "a") as log:
    log.write(json.dumps({{"tool": tool, "filter": args[args.index("--kernel-name") + 1],
                          "symbol": launch.kernel.lowered_name, "poison": launch.poison_outputs,
                          "problems": [p.label for _, p in launch.launches]}}) + "\\n")
if tool in os.environ.get("FAKE_SANITIZER_SLEEP", "").split(","):
    time.sleep(60)
if tool == os.environ.get("FAKE_SANITIZER_FAIL"):
    print("Traceback (most recent call last):\\nRuntimeError: the stand-in failed", file=sys.stderr)
    sys.exit(1)
print("========= COMPUTE-SANITIZER")
print("cuda-agent sanitizer run: launched")
report = json.loads(os.environ.get("FAKE_SANITIZER_REPORTS", "{{}}")).get(tool)
if report:
    print(report)
    sys.exit(99)
print("========= RACECHECK SUMMARY: 0 hazards displayed (0 errors, 0 warnings)" if tool == "racecheck"
      else "========= ERROR SUMMARY: 0 errors")
"""


def fake_sanitizer(folder: Path) -> Path:
    """An executable that answers like compute-sanitizer from $FAKE_SANITIZER_REPORTS ({tool: report}) and
    logs each call to $FAKE_SANITIZER_LOG; tests/test_cli.py and the server tests use it too."""
    path = folder / "compute-sanitizer"
    path.write_text(FAKE.format(python=sys.executable))
    path.chmod(0o755)
    return path


def calls(log: Path) -> list[dict[str, object]]:
    return [json.loads(line) for line in log.read_text().splitlines()] if log.exists() else []


REQUEST = SanitizerRequest(KERNEL, PROBLEMS, LAUNCHES, SAN_KERNELS, FILE, gpu_index=0)


def test_every_tool_runs_side_by_side_and_a_clean_kernel_passes(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
):
    executable = fake_sanitizer(tmp_path)
    monkeypatch.setenv("FAKE_SANITIZER_LOG", str(tmp_path / "log"))
    report = sanitize(REQUEST, executable=str(executable))
    assert report.status == "passed", report
    assert [run.tool for run in report.runs] == list(TOOLS)  # reported in the settings' order
    logged = sorted(calls(tmp_path / "log"), key=lambda c: TOOLS.index(c["tool"]))  # started together
    assert [c["tool"] for c in logged] == list(TOOLS)
    assert {c["filter"] for c in logged} == {"kne=shared_race"} and {c["symbol"] for c in logged} == {
        "shared_race"
    }
    # initcheck alone sees outputs unpoisoned (a memset would count as initialising them).
    assert [c["poison"] for c in logged] == [True, True, True, False]
    assert [c["problems"] for c in logged] == [
        ["n=333", "n=1000003"],
        ["n=333"],
        ["n=333"],
        ["n=333", "n=1000003"],
    ]


def test_a_finding_rejects_and_only_the_first_tools_findings_are_reported(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
):
    executable = fake_sanitizer(tmp_path)
    monkeypatch.setenv("FAKE_SANITIZER_LOG", str(tmp_path / "log"))
    race = RACECHECK_RACE.replace("========= COMPUTE-SANITIZER\n", "")
    monkeypatch.setenv("FAKE_SANITIZER_REPORTS", json.dumps({"racecheck": race}))
    report = sanitize(REQUEST, executable=str(executable))
    assert report.status == "rejected"
    assert [(r.tool, r.outcome) for r in report.runs] == [("memcheck", "clean"), ("racecheck", "findings")]
    assert (report.findings[0].line, report.findings[0].source_line) == (
        12, "tile[threadIdx.x] = i < n ? x[i] : 0.0f;",
    )  # fmt: skip
    assert sorted(c["tool"] for c in calls(tmp_path / "log")) == sorted(TOOLS)  # all ran, side by side


def test_the_tools_run_side_by_side(tmp_path: Path, monkeypatch: pytest.MonkeyPatch):
    """Each tool's run is mostly a process starting: four in a row held the editor's rewrite back 4.6 s."""
    executable = fake_sanitizer(tmp_path)
    monkeypatch.setenv("FAKE_SANITIZER_LOG", str(tmp_path / "log"))
    monkeypatch.setenv("FAKE_SANITIZER_SLEEP", ",".join(TOOLS))
    start = time.monotonic()
    report = sanitize(REQUEST, SanitizerSettings(timeout_s=1.0), executable=str(executable))
    assert [r.outcome for r in report.runs] == ["timeout"] * len(TOOLS)
    assert time.monotonic() - start < 1.0 * len(TOOLS)  # not one after another


def test_a_hung_tool_is_killed_on_timeout(tmp_path: Path, monkeypatch: pytest.MonkeyPatch):
    executable = fake_sanitizer(tmp_path)
    monkeypatch.setenv("FAKE_SANITIZER_LOG", str(tmp_path / "log"))
    monkeypatch.setenv("FAKE_SANITIZER_SLEEP", "memcheck")
    start = time.monotonic()
    report = sanitize(REQUEST, SanitizerSettings(timeout_s=1.0), executable=str(executable))
    assert time.monotonic() - start < 20
    assert report.status == "not_checked" and report.reason.startswith("memcheck timed out after 1 s")
    assert [r.outcome for r in report.runs] == ["timeout", "clean", "clean", "clean"]


def test_the_tool_is_found_on_path_or_as_named_and_missing_is_said(tmp_path: Path, monkeypatch):
    executable = fake_sanitizer(tmp_path)
    monkeypatch.setenv(SANITIZER_ENV, str(executable))
    assert find_compute_sanitizer() == str(executable)
    monkeypatch.setenv(SANITIZER_ENV, str(tmp_path / "nowhere" / "compute-sanitizer"))
    assert find_compute_sanitizer() is None  # named and missing: not looked for elsewhere
    monkeypatch.delenv(SANITIZER_ENV)
    monkeypatch.setenv("PATH", f"{tmp_path}{os.pathsep}{os.environ['PATH']}")
    assert find_compute_sanitizer() == str(executable)
    monkeypatch.setenv("FAKE_SANITIZER_LOG", str(tmp_path / "log"))
    assert sanitize(REQUEST).status == "passed" and len(calls(tmp_path / "log")) == len(TOOLS)


def test_without_the_tool_the_report_says_not_found(monkeypatch: pytest.MonkeyPatch, tmp_path: Path):
    monkeypatch.setenv(SANITIZER_ENV, str(tmp_path / "missing"))
    report = sanitize(REQUEST)
    assert (report.status, report.runs) == ("not_checked", ())
    assert report.summary() == "not checked by compute-sanitizer: not found"


# -- the gate: the best that passes, the next best after a rejection -------------------------------------


def timed(median_ms: float) -> TimingReport:
    return TimingReport("t", median_ms, median_ms, median_ms, 10)


def faster(description: str, speedup: float) -> CandidateResult:
    candidate = Candidate(f"// {description}\n", (256,), description, "test")
    comparison = Comparison(timed(1.0), timed(1.0 / speedup), speedup, (0.5, 0.6), True, False, "faster")
    compiled = CompileResult(True, None)
    return CandidateResult(candidate, compiled, VerificationReport(True), comparison)


class StubEngine:
    """Engine.sanitize only: a verdict per candidate description, each call logged (no GPU: the verdicts
    are logged nowhere)."""

    gpu = None
    recorder = CandidateLog()

    def __init__(self, verdicts: dict[str, SanitizerReport]) -> None:
        self.verdicts = verdicts
        self.asked: list[str] = []

    def sanitize(self, baseline, result, settings=None) -> SanitizerReport:  # type: ignore[no-untyped-def]
        self.asked.append(result.candidate.description)
        return self.verdicts.get(result.candidate.description, judge([], [], [], "x"))


RACE = judge(
    [
        read_tool_output(
            "racecheck", ProcessOutput(RACECHECK_RACE, 99, 1.0, False), ("n=333",), "", FILE, 60
        )[0]
    ],
    parse_output("racecheck", RACECHECK_RACE, FILE).findings,
    [],
    "x",
)
CLEAN = judge(
    [read_tool_output("memcheck", ProcessOutput(MEMCHECK_CLEAN, 0, 1.0, False), ("n=333",), "", FILE, 60)[0]],
    [],
    [],
    "x",
)


def test_a_rejected_best_gives_way_to_the_next_best_and_verdicts_are_kept():
    results = [faster("a", 3.0), faster("b", 2.0), faster("c", 1.5)]
    engine = StubEngine({"a": RACE, "b": CLEAN})
    gate = SanitizerGate(engine, baseline=None)  # type: ignore[arg-type]
    best = gate.best(results)
    assert best is not None and best.candidate.description == "b" and best.sanitizer is CLEAN
    assert engine.asked == ["a", "b"]
    annotated = gate.annotate(results)
    assert annotated[0].status == "rejected" and not annotated[0].faster
    assert annotated[0].reason.startswith("rejected by compute-sanitizer racecheck")
    assert "line 12 of the rewrite" in annotated[0].reason
    # Choosing again (the search goes on) checks only what is new.
    again = gate.best([*results, faster("d", 2.5)])
    assert again is not None and again.candidate.description == "d" and engine.asked == ["a", "b", "d"]
    explained = gate.explain(again)
    assert "a faster rewrite was rejected by compute-sanitizer (racecheck: Error: Race reported" in explained


def test_the_gate_gives_up_after_a_few_rejections_and_passes_unchecked_ones_through():
    results = [faster(name, 5.0 - i) for i, name in enumerate("abcde")]
    engine = StubEngine(dict.fromkeys("abcde", RACE))
    gate = SanitizerGate(engine, baseline=None, max_rejections=3)  # type: ignore[arg-type]
    assert gate.best(results) is None and gate.gave_up
    assert engine.asked == ["a", "b", "c"]
    assert "no further candidate checked after 3 rejections" in gate.explain(None)
    # The bound holds for the whole job: choosing again as the search goes on checks nothing more.
    assert gate.best([*results, faster("f", 9.0)]) is None and engine.asked == ["a", "b", "c"]
    missing = StubEngine(dict.fromkeys("abcde", not_checked("not found")))
    shown = SanitizerGate(missing, baseline=None).best(results)  # type: ignore[arg-type]
    assert shown is not None and shown.candidate.description == "a"
    assert (
        shown.sanitizer is not None
        and shown.sanitizer.summary() == "not checked by compute-sanitizer: not found"
    )
    assert shown.faster and shown.status == "faster"


def test_candidate_results_pickled_before_the_field_existed_read_as_unchecked():
    result = faster("a", 2.0)
    state = dict(result.__dict__)
    del state["sanitizer"]
    old = object.__new__(CandidateResult)
    object.__setattr__(old, "__dict__", state)
    assert old.sanitizer is None and old.faster


@pytest.mark.parametrize("text", [textwrap.dedent(RACECHECK_RACE)])
def test_the_parser_ignores_carriage_returns(text: str):
    assert parse_output("racecheck", text.replace("\n", "\r\n"), FILE).findings[0].line == 12
