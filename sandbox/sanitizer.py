"""A kernel checked by NVIDIA's compute-sanitizer before its rewrite is shown (caller side; no CuPy).

    report = sanitize(SanitizerRequest(kernel, problems, launches, source, filename, gpu_index))
    report.status   # "passed", "rejected" (a finding), "not_checked" (no tool here, or it could not run)

Each tool (memcheck, racecheck, synccheck, initcheck) runs in a process of its own, one after another,
since the sanitizer has to wrap a process from its start: `compute-sanitizer --tool T ... python -m
cuda_agent.sandbox.sanitizer_run REQUEST_FILE` (sandbox/sanitizer_run.py launches the kernel once per
problem). Every run has its own process group and is killed with it on timeout. Only the kernel under test
is instrumented (`--kernel-name kne=<symbol>`), not CuPy's fill kernels.

The tools' text output is parsed (the format of NVIDIA's manual and of runs on an H200 with compute-sanitizer
2025.3.1, rather than `--xml`, of which no verified example of every tool was at hand): each report starts
with a line after the `=========` prefix ("Invalid __global__ write of size 4 bytes", "Error: Race reported
between Write access at k+0x100 in k.cu:12", "Barrier error detected. Divergent thread(s) in warp",
"Uninitialized __global__ memory read of size 4 bytes") and goes on in indented lines. A kernel compiled
with -lineinfo gets `file.cu:LINE` in them; the line is mapped to the text that was compiled, whose lines
are the user's file's (agent/device_source.py keeps every line and column).

The caller holds the GPU while this runs (a timing beside it would be disturbed): see Sandbox.exclusive().
"""

from __future__ import annotations

import contextlib
import os
import re
import shutil
import signal
import subprocess
import sys
import tempfile
import time
from collections.abc import Sequence
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import Literal

from cuda_agent.sandbox.children import tracked
from cuda_agent.sandbox.plan import CompiledKernel, LaunchPlan, Problem
from cuda_agent.sandbox.sanitizer_run import SanitizerLaunch, write_request

SanitizerTool = Literal["memcheck", "racecheck", "synccheck", "initcheck"]
TOOLS: tuple[SanitizerTool, ...] = ("memcheck", "racecheck", "synccheck", "initcheck")
SANITIZER_ENV = "CUDA_AGENT_COMPUTE_SANITIZER"  # the executable, where it is not on PATH or in CUDA_HOME
RUNNER = "cuda_agent.sandbox.sanitizer_run"
ERROR_EXIT_CODE = 99  # --error-exitcode: the tool found errors (the runner itself exits 0, 2 or 3)
NOT_FOUND = "not found"
# Per tool, besides the common options. memcheck: a padding buffer after every allocation, so that a write
# a few elements past one buffer cannot land, unreported, in the next one (allocations may be adjacent).
TOOL_OPTIONS: dict[str, tuple[str, ...]] = {
    "memcheck": ("--padding", "65536"),
    "racecheck": (),
    "synccheck": (),
    # The runner draws inputs with CuPy kernels the filter leaves uninstrumented and copies them through the
    # host: initcheck would call that copy's read "uninitialized" (seen on the H200). The kernel's own reads
    # are what is checked; the destination of the host-to-device copy counts as written either way.
    "initcheck": ("--check-api-memory-access", "no"),
}

Outcome = Literal["clean", "findings", "failed", "timeout"]
Verdict = Literal["passed", "rejected", "not_checked"]


@dataclass(frozen=True)
class SanitizerSettings:
    tools: tuple[SanitizerTool, ...] = TOOLS
    timeout_s: float = 60.0  # per tool: its process group is killed after this
    # memcheck and initcheck run on every problem (the benchmark size and the verification sizes) of at most
    # this many elements in all its buffers, and always on the smallest: they instrument every global access
    # (10-100x slower), so a 16M-element benchmark size of a heavy kernel would take minutes, while the
    # smaller, odd verification sizes are where tails and edge blocks go out of bounds or read what no one
    # wrote. racecheck and synccheck look at shared memory and barriers, which do not depend on the size
    # but cost the most: the smallest problem only.
    memory_check_max_elements: int = 1 << 24
    print_limit: int = 20  # reports printed by a tool (each thread's error is one)
    seed: int = 0  # of the input set drawn for the launch
    stop_at_first_finding: bool = True  # one finding rejects: the later tools' findings are not reported


@dataclass(frozen=True)
class SanitizerRequest:
    kernel: CompiledKernel  # compiled with -lineinfo, so reports carry file:line
    problems: tuple[Problem, ...]
    launches: tuple[LaunchPlan, ...]  # one per problem
    source: str  # the text compiled: its lines are the ones findings are mapped to
    filename: str  # the name it was compiled under (reports print its base name)
    gpu_index: int = 0


@dataclass(frozen=True)
class SanitizerFinding:
    """One report of a tool (repeats of it, one per thread, counted), mapped to the compiled text."""

    tool: str
    kind: str  # out_of_bounds, misaligned, invalid_access, race, barrier, uninitialized, malloc_free, other
    message: str  # the tool's report, its lines joined (host backtraces left out)
    line: int | None = None  # 1-based, in the user's file (the compiled text keeps its lines)
    column: int | None = None  # 1-based, where the tool gives one
    source_line: str = ""  # that line's text, stripped
    file: str | None = None  # where the tool put it when not in the user's file (a header), else None
    other_lines: tuple[int, ...] = ()  # further lines of the user's file in the report (a race's other side)
    count: int = 1  # identical reports (same kind, message and line) folded into this one

    def describe(self, of: str = "") -> str:
        """One line for a person; `of` follows the line number ("line 14 of the rewrite")."""
        where = ""
        if self.line is not None:
            where = f"; line {self.line}{of}" + (f": {self.source_line}" if self.source_line else "")
        elif self.file:
            where = f"; in {self.file}"
        repeats = f" (×{self.count})" if self.count > 1 else ""
        return f"{self.tool}: {self.message}{repeats}{where}"


@dataclass(frozen=True)
class SanitizerToolRun:
    tool: str
    outcome: Outcome
    seconds: float
    problems: tuple[str, ...]  # Problem.label of each size launched
    findings: int = 0
    summary: str = ""  # the tool's own last line: "ERROR SUMMARY: 0 errors"
    message: str = ""  # why it failed or timed out; notes (API errors reported) otherwise
    exit_code: int | None = None


@dataclass(frozen=True)
class SanitizerReport:
    status: Verdict
    runs: tuple[SanitizerToolRun, ...] = ()
    findings: tuple[SanitizerFinding, ...] = ()
    reason: str = ""  # why it was not checked: "not found", "racecheck timed out after 60 s", ...
    executable: str = ""
    notes: tuple[str, ...] = ()
    wall_seconds: float | None = None  # the tools run side by side: the gate's cost is this, not their sum

    @property
    def passed(self) -> bool:
        return self.status == "passed"

    @property
    def rejected(self) -> bool:
        return self.status == "rejected"

    @property
    def seconds(self) -> float:
        """What the check cost in wall time (the tools' own seconds overlap)."""
        if self.wall_seconds is not None:
            return self.wall_seconds
        return sum(run.seconds for run in self.runs)

    def costs(self) -> str:
        """Seconds per tool and the sizes each ran: "memcheck 1.2 s (n=333), racecheck 2.0 s (n=333)"."""
        parts = []
        for run in self.runs:
            state = "" if run.outcome in ("clean", "findings") else f" {run.outcome}"
            parts.append(f"{run.tool}{state} {run.seconds:.1f} s ({'; '.join(run.problems)})")
        return ", ".join(parts)

    def summary(self, of: str = "") -> str:
        """The verdict in a line; `of` as in SanitizerFinding.describe."""
        if self.status == "rejected":
            first = self.findings[0]
            more = f" (and {len(self.findings) - 1} more)" if len(self.findings) > 1 else ""
            return f"rejected by compute-sanitizer {first.describe(of)}{more}"
        if self.status == "passed":
            costs = f"{self.costs()} (side by side, {self.seconds:.1f} s)"
            return f"checked by compute-sanitizer, no findings: {costs}"
        ran = f" ({self.costs()})" if self.runs else ""
        return f"not checked by compute-sanitizer: {self.reason}{ran}"


def not_checked(reason: str, **fields: object) -> SanitizerReport:
    return SanitizerReport("not_checked", reason=reason, **fields)  # type: ignore[arg-type]


# -- finding the tool ----------------------------------------------------------------------------------


def find_compute_sanitizer() -> str | None:
    """$CUDA_AGENT_COMPUTE_SANITIZER when set (only it: a path or a name on PATH), else compute-sanitizer on
    PATH, else under CUDA_HOME / CUDA_PATH / /usr/local/cuda (bin/, or compute-sanitizer/ in older kits)."""
    chosen = os.environ.get(SANITIZER_ENV, "").strip()
    if chosen:
        found = shutil.which(chosen)
        return found if found and os.access(found, os.X_OK) else None
    found = shutil.which("compute-sanitizer")
    if found:
        return found
    roots = [os.environ.get("CUDA_HOME"), os.environ.get("CUDA_PATH"), "/usr/local/cuda"]
    for root in filter(None, roots):
        for relative in ("bin/compute-sanitizer", "compute-sanitizer/compute-sanitizer"):
            candidate = os.path.join(root, relative)
            if os.access(candidate, os.X_OK):
                return candidate
    return None


def sanitizer_version(executable: str) -> str:
    """Its "Version ..." line, for `cuda-agent doctor`; why not, if it cannot say."""
    try:
        done = subprocess.run(
            [executable, "--version"], capture_output=True, text=True, timeout=20, check=False
        )
    except (OSError, subprocess.SubprocessError) as exc:
        return f"cannot run it: {exc}"
    lines = [line.strip() for line in (done.stdout + done.stderr).splitlines() if line.strip()]
    return next((line for line in lines if "version" in line.lower()), lines[-1] if lines else "no version")


# -- running the tools ---------------------------------------------------------------------------------


def buffer_elements(problem: Problem) -> int:
    return sum(a.numel for a in problem.arguments if a.is_buffer)


def problems_for_tool(tool: str, problems: Sequence[Problem], settings: SanitizerSettings) -> tuple[int, ...]:
    """Indices of the problems `tool` launches, smallest first (see SanitizerSettings)."""
    if not problems:
        return ()
    order = sorted(range(len(problems)), key=lambda i: buffer_elements(problems[i]))
    if tool not in ("memcheck", "initcheck"):
        return (order[0],)
    fitting = [i for i in order if buffer_elements(problems[i]) <= settings.memory_check_max_elements]
    return tuple(fitting) or (order[0],)


def tool_command(
    executable: str, tool: str, request_path: str, symbol: str, settings: SanitizerSettings
) -> list[str]:
    return [
        executable,
        "--tool", tool,
        "--error-exitcode", str(ERROR_EXIT_CODE),
        "--print-limit", str(settings.print_limit),
        "--show-backtrace", "device",  # device frames place a finding inside inlined device functions
        "--kernel-name", f"kne={symbol}",  # only the kernel under test, not CuPy's fill kernels
        "--launch-timeout", str(max(10, int(settings.timeout_s))),
        *TOOL_OPTIONS.get(tool, ()),
        sys.executable, "-m", RUNNER, request_path,
    ]  # fmt: skip


@dataclass(frozen=True)
class ProcessOutput:
    text: str  # stdout, then stderr
    exit_code: int | None  # None when it was killed on timeout
    seconds: float
    timed_out: bool


def run_process(command: list[str], timeout_s: float, cwd: str) -> ProcessOutput:
    """Run in a process group of its own; on timeout (or if we are interrupted) kill the whole group:
    the sanitizer's target process is its child."""
    start = time.perf_counter()
    environment = dict(os.environ, PYTHONUNBUFFERED="1")
    try:
        process = subprocess.Popen(
            command, cwd=cwd, env=environment, stdin=subprocess.DEVNULL, stdout=subprocess.PIPE,
            stderr=subprocess.PIPE, text=True, errors="replace", start_new_session=True,
        )  # fmt: skip
    except OSError as exc:
        return ProcessOutput(f"cannot start {command[0]}: {exc}", 127, time.perf_counter() - start, False)
    timed_out = False
    with tracked(process, own_group=True):  # a server leaving at once kills its group (children.py)
        try:
            stdout, stderr = process.communicate(timeout=timeout_s)
        except subprocess.TimeoutExpired:
            timed_out = True
            _kill_group(process)
            stdout, stderr = process.communicate()
        finally:
            if process.poll() is None:  # interrupted: leave nothing running on the GPU
                _kill_group(process)
                process.wait()
    code = None if timed_out else process.returncode
    return ProcessOutput(f"{stdout}\n{stderr}", code, time.perf_counter() - start, timed_out)


def _kill_group(process: subprocess.Popen[str]) -> None:
    with contextlib.suppress(ProcessLookupError, PermissionError):
        os.killpg(process.pid, signal.SIGKILL)


def sanitize(
    request: SanitizerRequest, settings: SanitizerSettings | None = None, executable: str | None = None
) -> SanitizerReport:
    """Run the tools of `settings` on the kernel, side by side; a finding rejects it (with
    `stop_at_first_finding`, only the first tool's findings, in the order of `settings.tools`, are kept)."""
    settings = settings or SanitizerSettings()
    executable = executable or find_compute_sanitizer()
    if executable is None:
        return not_checked(NOT_FOUND)
    runs: list[SanitizerToolRun] = []
    findings: list[SanitizerFinding] = []
    notes: list[str] = []
    started = time.perf_counter()
    with tempfile.TemporaryDirectory(prefix="cuda-agent-sanitizer-") as folder:
        commands, chosen_problems = [], []
        for tool in settings.tools:
            chosen = problems_for_tool(tool, request.problems, settings)
            launch = SanitizerLaunch(
                request.kernel,
                tuple((request.launches[i], request.problems[i]) for i in chosen),
                gpu_index=request.gpu_index,
                seed=settings.seed,
                poison_outputs=tool != "initcheck",
            )
            path = str(Path(folder) / f"{tool}.pickle")
            write_request(path, launch)
            commands.append(tool_command(executable, tool, path, request.kernel.lowered_name, settings))
            chosen_problems.append(chosen)
        # The tools side by side: each run is mostly its process starting (Python, CuPy, the CUDA context),
        # so four in a row took 4.6 s on the H200 and held back the editor's first rewrite by as much.
        with ThreadPoolExecutor(max_workers=len(commands) or 1) as pool:
            outputs = list(pool.map(lambda c: run_process(c, settings.timeout_s, folder), commands))
        for tool, chosen, output in zip(settings.tools, chosen_problems, outputs, strict=True):
            run, found, noted = read_tool_output(
                tool, output, tuple(request.problems[i].label for i in chosen), request.source,
                request.filename, settings.timeout_s,
            )  # fmt: skip
            runs.append(run)
            findings += found
            notes += noted
            if found and settings.stop_at_first_finding:
                break
    return replace(judge(runs, findings, notes, executable), wall_seconds=time.perf_counter() - started)


def judge(
    runs: Sequence[SanitizerToolRun],
    findings: Sequence[SanitizerFinding],
    notes: Sequence[str],
    executable: str,
) -> SanitizerReport:
    """A finding rejects; every tool clean passes; otherwise it was not (fully) checked, and says why."""
    common = {"runs": tuple(runs), "executable": executable, "notes": tuple(notes)}
    if not runs:
        return not_checked("no tool was run", executable=executable)
    if findings:
        return SanitizerReport("rejected", findings=tuple(findings), **common)  # type: ignore[arg-type]
    unfinished = [run for run in runs if run.outcome != "clean"]
    if not unfinished:
        return SanitizerReport("passed", **common)  # type: ignore[arg-type]
    reason = "; ".join(f"{run.tool} {run.message}" for run in unfinished)
    return SanitizerReport("not_checked", reason=reason, **common)  # type: ignore[arg-type]


def read_tool_output(
    tool: str,
    output: ProcessOutput,
    problems: tuple[str, ...],
    source: str,
    filename: str,
    timeout_s: float,
) -> tuple[SanitizerToolRun, list[SanitizerFinding], list[str]]:
    """One tool's run judged from its output and exit status: the run, its findings, its notes."""
    parsed = parse_output(tool, output.text, filename)
    findings = [map_to_source(f, source) for f in parsed.findings]
    errors_counted = output.exit_code == ERROR_EXIT_CODE or parsed.error_count not in (None, 0)
    if errors_counted:  # reports of a kind not known here count only where the tool counted errors
        findings += [map_to_source(f, source) for f in parsed.unknown]
    notes = [f"{tool}: {note}" for note in parsed.notes]
    base = SanitizerToolRun(tool, "clean", output.seconds, problems, summary=parsed.summary,
                            exit_code=output.exit_code)  # fmt: skip
    if findings:
        return replace(base, outcome="findings", findings=len(findings)), findings, notes
    if output.timed_out:
        return replace(base, outcome="timeout", message=f"timed out after {timeout_s:g} s"), [], notes
    if output.exit_code == 0 or (output.exit_code == ERROR_EXIT_CODE and parsed.api_errors):
        message = (
            f"reported {parsed.api_errors} CUDA API error(s), none in the kernel"
            if output.exit_code == ERROR_EXIT_CODE
            else ""
        )
        return replace(base, message=message), [], notes
    if output.exit_code == ERROR_EXIT_CODE:  # errors counted, none of them readable: do not pass it
        unreadable = SanitizerFinding(
            tool, "other", f"{parsed.summary or 'errors reported'}, in a form cuda-agent cannot read: "
            f"{_tail(output.text, 3)}",
        )  # fmt: skip
        return replace(base, outcome="findings", findings=1), [unreadable], notes
    message = f"could not run (exit status {output.exit_code}): {_tail(output.text, 4)}"
    return replace(base, outcome="failed", message=message), [], notes


def _tail(text: str, lines: int) -> str:
    kept = [line.strip() for line in text.splitlines() if line.strip()]
    return " / ".join(kept[-lines:]) if kept else "no output"


# -- reading the output --------------------------------------------------------------------------------

_PREFIXED = re.compile(r"^={8,}(?P<body>.*)$")
_SUMMARY = re.compile(r"^(?P<which>ERROR|RACECHECK|LEAK) SUMMARY:\s*(?P<rest>.*)$")
_SUMMARY_COUNT = re.compile(r"^(\d[\d,]*)\s+(?:errors?|hazards?)")
# Lines that carry on a report even where the output lost its indentation (as in the manual's examples).
_CONTINUATION = re.compile(
    r"^(at |by thread|by warp|and |Address |Access |Saved host|Host Frame|Device Frame|Current Value|"
    r"Incoming Value|Write Thread|Read Thread|Not written|These unused|\d+% of allocation)"
)
_RACE = re.compile(
    r"^(?P<severity>error|warning|info):\s+(?:\([^)]*\)\s+)?(?:race reported|potential \w+ hazard)", re.I
)
# Other files a report names: "... at __syncwarp(unsigned int)+0xf0 in /usr/local/cuda/include/x.hpp:110"
_LOCATION = re.compile(r"\bin (?P<file>\S+?):(?P<line>\d+)")
_BACKTRACE_HOST = re.compile(r"^(Saved host|Host Frame)")
# The tool's own state ("Error: process didn't terminate successfully", "Internal Sanitizer Error: ..."),
# its warnings, leaks and unused memory: notes, not findings (races, "Error: Race ...", are matched first).
_NOTE = re.compile(r"^(Leaked|Unused|Warning:|WARNING:|Internal Sanitizer Error|Error:|ERROR:|Target )")


@dataclass
class ParsedOutput:
    findings: list[SanitizerFinding] = field(default_factory=list)
    unknown: list[SanitizerFinding] = field(default_factory=list)  # reports of a kind not known here
    notes: list[str] = field(default_factory=list)  # API errors, the tool's own warnings and errors
    api_errors: int = 0
    summary: str = ""  # the last ERROR / RACECHECK SUMMARY line
    error_count: int | None = None  # from that line


def parse_output(tool: str, text: str, filename: str) -> ParsedOutput:
    """The reports in a tool's output (the program's own lines, without the prefix, are skipped)."""
    parsed = ParsedOutput()
    known: dict[tuple[object, ...], SanitizerFinding] = {}
    unknown: dict[tuple[object, ...], SanitizerFinding] = {}
    for record in _records(text, parsed):
        head = record[0]
        kind = _kind(head, " ".join(record))
        if kind in ("api", "note"):
            parsed.api_errors += kind == "api"
            if head not in parsed.notes:
                parsed.notes.append(head)
            continue
        finding = _finding(tool, kind, record, filename)
        # The same report from many threads (memcheck prints one per thread) is one finding, counted.
        folded = unknown if kind == "other" else known
        key = (kind, head, finding.line, finding.file)
        seen = folded.get(key)
        folded[key] = replace(seen, count=seen.count + 1) if seen else finding
    parsed.findings, parsed.unknown = list(known.values()), list(unknown.values())
    return parsed


def _records(text: str, parsed: ParsedOutput) -> list[list[str]]:
    """Prefixed lines grouped into reports: a line right after the prefix starts one, indented lines (or
    known continuations) carry it on, a bare prefix or a summary ends it."""
    records: list[list[str]] = []
    current: list[str] | None = None
    for raw in text.splitlines():
        match = _PREFIXED.match(raw.rstrip("\r"))
        if match is None:
            continue  # the program's own output
        body = match["body"]
        line = body.strip()
        if not line:
            current = None
            continue
        summary = _SUMMARY.match(line)
        if summary is not None:
            if summary["which"] != "LEAK":
                parsed.summary = line
                count = _SUMMARY_COUNT.match(summary["rest"])
                parsed.error_count = int(count[1].replace(",", "")) if count else None
            current = None
            continue
        if line == "COMPUTE-SANITIZER":
            continue
        indented = body.startswith("  ")
        if current is not None and (indented or _CONTINUATION.match(line)):
            current.append(line)
            continue
        current = [line]
        records.append(current)
    return records


def _kind(head: str, text: str) -> str:
    lowered = text.lower()
    if head.startswith("Program hit"):
        return "api"
    if _RACE.match(head) or head.startswith("Potential invalid __shared__"):
        return "race"
    if re.match(r"Invalid (__\w+__ )?(read|write|atomic)", head) or re.match(
        r"(Out-of-range|Misaligned) (Shared|Local)", head
    ):
        if "out of bounds" in lowered or "out-of-range" in lowered:
            return "out_of_bounds"
        return "misaligned" if "misaligned" in lowered else "invalid_access"
    if head.startswith("Uninitialized"):
        return "uninitialized"
    if head.startswith("Barrier error") or head.startswith("Warpgroup MMA"):
        return "barrier"
    if head.startswith("Malloc/Free error"):
        return "malloc_free"
    if _NOTE.match(head):
        return "note"
    return "other"


def _finding(tool: str, kind: str, record: list[str], filename: str) -> SanitizerFinding:
    kept = [line for line in record if not _BACKTRACE_HOST.match(line)]
    own, others = _locations(kept, filename)
    file = None
    line = column = None
    if own:
        line, column = own[0]
    elif others:
        file = others[0]
    rest = tuple(dict.fromkeys(n for n, _ in own[1:] if n != line))
    return SanitizerFinding(tool, kind, " ".join(kept[:6]), line, column, file=file, other_lines=rest)


def _locations(lines: list[str], filename: str) -> tuple[list[tuple[int, int | None]], list[str]]:
    """(line, column) of each place in `filename` the report names, in order; the other files named."""
    name = _base_name(filename)
    # "in k.cu:12", "in /path/k.cu:20:globFunction(int*)" (older kits), "in /path/k.cu:12:5" (a column):
    # the user's file by its base name (paths are stripped by default), which may hold spaces.
    ours = re.compile(
        r"(?:^|(?<=[\s/\\]))" + re.escape(name) + r":(?P<line>\d+)(?::(?P<column>\d+)(?![\w(]))?"
    )
    own: list[tuple[int, int | None]] = []
    others: list[str] = []
    for text in lines:
        for match in ours.finditer(text):
            own.append((int(match["line"]), int(match["column"]) if match["column"] else None))
        for match in _LOCATION.finditer(text):
            if _base_name(match["file"]) != name:
                others.append(f"{match['file']}:{match['line']}")
    return own, others


def _base_name(path: str) -> str:
    return path.replace("\\", "/").rsplit("/", 1)[-1]


def map_to_source(finding: SanitizerFinding, source: str) -> SanitizerFinding:
    """The finding with its line's text from `source` (the text that was compiled)."""
    if finding.line is None:
        return finding
    lines = source.split("\n")
    if not 1 <= finding.line <= len(lines):
        return finding
    return replace(finding, source_line=lines[finding.line - 1].strip())
