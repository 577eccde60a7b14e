"""Compile with nvcc in a temporary folder: for files NVRTC cannot take (host headers, INFINITY, printf).

Diagnostics come from EDG's SARIF output (`-Xcudafe --output_mode=sarif`, on stderr), which has
columns; the host preprocessor (gcc) and ptxas still print plain text.

nvcc has no name expressions, so the kernel's symbol is found through the cubin itself: a probe
line appended to the source, `__device__ void* probe = (void*)(KERNEL);`, makes nvcc instantiate a
template kernel and leaves an ELF relocation that names exactly the kernel's symbol (no demangling,
no guessing among kernels). The probe costs 8 bytes of global memory in the cubin.
"""

from __future__ import annotations

import json
import os
import re
import shutil
import subprocess
import tempfile
import time
import urllib.parse
from collections.abc import Iterator, Sequence
from typing import Any

from cuda_agent.sandbox.children import tracked
from cuda_agent.sandbox.cubin import relocation_target
from cuda_agent.sandbox.ptxas_info import compiled, ptxas_diagnostics
from cuda_agent.sandbox.reports import CompileDiagnostic, CompileResult, Severity

NVCC_TIMEOUT_S = 300.0
PROBE_FILE = "__cuda_agent_kernel_name__"  # a #line name, so errors in the probe are told apart
PROBE_SYMBOL = "__cuda_agent_kernel_ref"

# Host preprocessor: "/tmp/x/kernel.cu:1:10: fatal error: missing.cuh: No such file or directory"
_GCC_LINE = re.compile(
    r"^(?P<file>[^:\n]+):(?P<line>\d+):(?P<column>\d+): "
    r"(?P<severity>fatal error|error|warning|note): (?P<message>.*)$"
)
_NVCC_LINE = re.compile(r"^nvcc (?P<severity>fatal|error|warning)\s*: (?P<message>.*)$")
_SEVERITY: dict[str, Severity] = {
    "fatal error": "error",
    "fatal": "error",
    "error": "error",
    "warning": "warning",
    "note": "note",
    "remark": "note",
}


def find_nvcc() -> str | None:
    """nvcc on PATH, else in CUDA_HOME / CUDA_PATH / /usr/local/cuda."""
    found = shutil.which("nvcc")
    if found:
        return found
    roots = [os.environ.get("CUDA_HOME"), os.environ.get("CUDA_PATH"), "/usr/local/cuda"]
    for root in filter(None, roots):
        candidate = os.path.join(root, "bin", "nvcc")
        if os.access(candidate, os.X_OK):
            return candidate
    return None


def with_probe(source: str, kernel: str) -> str:
    """`source` and the probe line that names `kernel`'s symbol in the cubin (see the module docstring)."""
    return f'{source}\n#line 1 "{PROBE_FILE}"\n__device__ void* {PROBE_SYMBOL} = (void*)({kernel});\n'


def nvcc_command(
    nvcc: str, source_path: str, cubin_path: str, arch: str, include_dirs: Sequence[str], flags: Sequence[str]
) -> list[str]:
    command = [nvcc, "-cubin", "-x", "cu", f"-arch={arch}"]  # -x cu: a .cuh or .cpp name is CUDA too
    command += ["-Xptxas", "-v", "-Xcudafe", "--output_mode=sarif"]  # resources; diagnostics with columns
    command += [f"-I{d}" for d in include_dirs]
    return [*command, *flags, "-o", cubin_path, source_path]


def compile_with_nvcc(
    source: str,
    kernel: str,
    *,
    filename: str,
    arch: str,
    include_dirs: Sequence[str],
    flags: Sequence[str],
    nvcc: str,
) -> CompileResult:
    """Compile with the given nvcc; bad CUDA (or a hung nvcc) gives ok=False with diagnostics."""
    start = time.perf_counter()
    with tempfile.TemporaryDirectory(prefix="cuda-agent-nvcc-") as folder:
        # The user's file name, so messages and __FILE__ read as in their editor.
        source_path = os.path.join(folder, os.path.basename(filename) or "kernel.cu")
        cubin_path = os.path.join(folder, "kernel.cubin")
        with open(source_path, "w", encoding="utf-8") as file:
            file.write(with_probe(source, kernel))
        command = nvcc_command(nvcc, source_path, cubin_path, arch, include_dirs, flags)
        returncode, log = _run(command, folder)
        diagnostics = parse_nvcc_log(log, source_path, filename, kernel)
        cubin = b""
        if returncode == 0 and os.path.isfile(cubin_path):
            with open(cubin_path, "rb") as file:
                cubin = file.read()
    seconds = time.perf_counter() - start
    lowered = relocation_target(cubin, PROBE_SYMBOL) if cubin else None
    if lowered is None:
        if not any(d.severity == "error" for d in diagnostics):
            diagnostics.append(_unexplained_failure(returncode, cubin, kernel, log))
        return CompileResult(False, None, tuple(diagnostics), "nvcc", seconds, log)
    return compiled(kernel, lowered, cubin, "nvcc", arch, flags, log, diagnostics, seconds)


def _run(command: list[str], folder: str) -> tuple[int | None, str]:
    """nvcc's exit status (None: it did not finish) and everything it printed."""
    try:
        process = subprocess.Popen(
            command, cwd=folder, stdout=subprocess.PIPE, stderr=subprocess.PIPE, encoding="utf-8",
            errors="replace",
        )  # fmt: skip
    except OSError as exc:
        return None, f"nvcc could not be started: {exc}"
    with process, tracked(process):  # tracked: a server leaving at once kills it (children.py)
        try:
            stdout, stderr = process.communicate(timeout=NVCC_TIMEOUT_S)
        except subprocess.TimeoutExpired:
            process.kill()
            process.communicate()
            return None, f"nvcc did not finish within {NVCC_TIMEOUT_S:.0f} s"
        except BaseException:  # interrupted: as subprocess.run does, leave nothing running
            process.kill()
            raise
    return process.returncode, stderr + stdout


def _unexplained_failure(returncode: int | None, cubin: bytes, kernel: str, log: str) -> CompileDiagnostic:
    if returncode is None:
        return CompileDiagnostic("error", log)
    if returncode != 0 or not cubin:
        tail = "\n".join(log.strip().splitlines()[-5:])
        return CompileDiagnostic("error", f"nvcc failed (exit status {returncode}): {tail}")
    return CompileDiagnostic(
        "error", f"{kernel!r} is not a __global__ kernel of this file (none in the cubin)"
    )


# --- diagnostics --------------------------------------------------------------------------------


def parse_nvcc_log(log: str, source_path: str, filename: str, kernel: str) -> list[CompileDiagnostic]:
    """Diagnostics from nvcc's output: EDG's SARIF results, then the plain-text lines of the other tools."""

    folder = os.path.dirname(source_path)
    user_file = os.path.realpath(source_path)

    def place(
        path: str, line: int | None, column: int | None, severity: Severity, message: str
    ) -> CompileDiagnostic:
        """On the user's file (by their name), on a header (by its path), or on the kernel name."""
        if os.path.basename(path) == PROBE_FILE:
            return CompileDiagnostic(severity, f"kernel name {kernel!r}: {message}")
        if os.path.realpath(os.path.join(folder, path)) == user_file:
            path = filename
        return CompileDiagnostic(severity, message, line, column, path)

    diagnostics = []
    for result in sarif_results(log):
        located = _sarif_location(result)
        severity = _SEVERITY.get(result.get("level", "error"), "note")
        message = result.get("message", {}).get("text", "")
        if located is None:  # e.g. "The warnings can be suppressed with -diag-suppress": not about the code
            if severity == "error":
                diagnostics.append(CompileDiagnostic(severity, message))
            continue
        diagnostics.append(place(*located, severity, message))
    for line in log.splitlines():
        if match := _GCC_LINE.match(line):
            severity = _SEVERITY[match["severity"]]
            diagnostics.append(
                place(match["file"], int(match["line"]), int(match["column"]), severity, match["message"])
            )
        elif match := _NVCC_LINE.match(line):
            diagnostics.append(CompileDiagnostic(_SEVERITY[match["severity"]], f"nvcc: {match['message']}"))
    return diagnostics + ptxas_diagnostics(log)


def sarif_results(log: str) -> Iterator[dict[str, Any]]:
    """Each SARIF result object in `log`, read one by one.

    nvcc 13.0's SARIF is not always valid JSON (a comma goes missing between results after a
    remark), so results are decoded where they start rather than the document as a whole. Within a
    result, its `relatedLocations` (the candidates of a failed overload resolution) may lack commas
    too: such a result is decoded without them, which keeps its message and location.
    """
    decoder = json.JSONDecoder()
    position = log.find('{"ruleId"')
    while position != -1:
        try:
            result, end = decoder.raw_decode(log, position)
        except json.JSONDecodeError:
            result, end = _without_related_locations(decoder, log, position), position + 1
        if isinstance(result, dict):
            yield result
        position = log.find('{"ruleId"', end)


def _without_related_locations(decoder: json.JSONDecoder, log: str, position: int) -> Any:
    """The result starting at `position`, cut before its `relatedLocations` and closed; None if that fails."""
    next_result = log.find('{"ruleId"', position + 1)
    related = log.find(',"relatedLocations"', position, next_result if next_result != -1 else len(log))
    if related == -1:
        return None
    try:
        return decoder.decode(log[position:related] + "}")
    except json.JSONDecodeError:
        return None


def _sarif_location(result: dict[str, Any]) -> tuple[str, int | None, int | None] | None:
    """(file path, line, column) of a SARIF result; columns count code points (its columnKind)."""
    for location in result.get("locations", []):
        physical = location.get("physicalLocation", {})
        uri = physical.get("artifactLocation", {}).get("uri")
        if uri:
            region = physical.get("region", {})
            path = urllib.parse.unquote(urllib.parse.urlparse(uri).path)
            return path, region.get("startLine"), region.get("startColumn")
    return None


# --- the cubin's ELF symbol table ---------------------------------------------------------------
