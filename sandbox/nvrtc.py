"""Compile with NVRTC through `cuda.bindings.nvrtc`: in process, ~50 ms a small kernel, no GPU needed.

CuPy's RawModule asks the driver and so needs a GPU; the low-level bindings do not.
NVRTC has no host headers (<cstdio>, <math.h>: no INFINITY, no FLT_MAX); `compile.py` falls
back to nvcc for those files.
"""

from __future__ import annotations

import functools
import os
import re
import shutil
import time
from collections.abc import Iterator, Sequence
from contextlib import contextmanager
from typing import Any

from cuda_agent.sandbox.ptxas_info import compiled, ptxas_diagnostics
from cuda_agent.sandbox.reports import CompileDiagnostic, CompileResult, Severity

# NVRTC reports an unknown kernel name expression against this pseudo file.
NAME_MAP_FILE = "__nv_name_map"

# "kernel.cu(3): error: identifier "x" is undefined", "kernel.cu(11): warning #177-D: ..."
_EDG_HEADER = re.compile(
    r"^(?P<file>.+?)\((?P<line>\d+)\): (?P<severity>catastrophic error|error|warning|remark|note)"
    r"(?: #[\w-]+)?: (?P<message>.*)$"
)
_NVRTC_OPTION_ERROR = re.compile(r"^nvrtc: (?P<severity>error|warning): (?P<message>.*)$")
_CARET = re.compile(r"^\s*\^\s*$")
_LOG_NOISE = re.compile(
    r"^(\d+ (catastrophic )?errors? detected in the compilation|Compilation terminated|Remark: |\s*ptxas)"
)
# nvcc's host optimisation level; NVRTC rejects it, and device code is optimised at -O3 either way.
_HOST_OPTIMISATION = re.compile(r"^-O[0-3]$")
# nvcc options NVRTC does not take, from a compile_commands.json or the user. The host compiler's say nothing
# about device code and are left out; a system include folder is an include folder to NVRTC. The last kind
# changes what device code means, so a compile with one goes to nvcc (`nvrtc_rejects`).
_HOST_COMPILER_OPTIONS = frozenset({"-Xcompiler", "--compiler-options", "-ccbin", "--compiler-bindir"})
_SYSTEM_INCLUDE_OPTIONS = frozenset({"-isystem", "--system-include"})
_NVCC_ONLY_OPTIONS = frozenset(
    {
        "--expt-relaxed-constexpr", "-expt-relaxed-constexpr", "--expt-extended-lambda",
        "-expt-extended-lambda", "--extended-lambda", "-extended-lambda",
    }
)  # fmt: skip
_SEVERITY: dict[str, Severity] = {
    "catastrophic error": "error",
    "error": "error",
    "warning": "warning",
    "remark": "note",
    "note": "note",
}


class NvrtcError(RuntimeError):
    """An NVRTC call other than the compile itself failed: a broken installation, not bad CUDA."""


@functools.cache
def nvrtc_unavailable_reason() -> str | None:
    """None when NVRTC can be used here, else why not (shown to the user)."""
    try:
        from cuda.bindings import nvrtc

        result, _major, _minor = nvrtc.nvrtcVersion()
    except Exception as exc:  # ImportError, or the library failed to load: the message says which
        return f"NVRTC is not available ({type(exc).__name__}: {exc})"
    if result != nvrtc.nvrtcResult.NVRTC_SUCCESS:
        return f"NVRTC is not available ({result.name})"
    return None


def _has_cuda_headers(directory: str) -> bool:
    return os.path.isfile(os.path.join(directory, "cuda_fp16.h"))


@functools.cache
def cuda_include_dirs() -> tuple[str, ...]:
    """The CUDA toolkit's include folders (cuda_fp16.h, cuda_bf16.h, CCCL), which NVRTC needs as -I."""
    candidates = [
        os.path.join(os.environ[var], "include") for var in ("CUDA_HOME", "CUDA_PATH") if var in os.environ
    ]
    nvcc = shutil.which("nvcc")
    if nvcc:  # /usr/local/bin/nvcc may be a wrapper script: its sibling include/ is then not CUDA's
        candidates.append(os.path.join(os.path.dirname(os.path.dirname(os.path.realpath(nvcc))), "include"))
    candidates.append("/usr/local/cuda/include")
    found = next((c for c in candidates if _has_cuda_headers(c)), None) or _pathfinder_include_dir()
    if found is None or not _has_cuda_headers(found):
        return ()
    # CUDA 13 keeps CCCL (cuda/std, cub, thrust) in its own folder.
    cccl = os.path.join(found, "cccl")
    return (found, cccl) if os.path.isdir(cccl) else (found,)


def _pathfinder_include_dir() -> str | None:
    """cuda-pathfinder (a cuda-bindings dependency) also knows the nvidia wheels and conda layouts."""
    try:
        from cuda.pathfinder import find_nvidia_header_directory

        return find_nvidia_header_directory("cudart")
    except Exception:  # missing or failing: the other places were already tried
        return None


def nvrtc_options(arch: str, include_dirs: Sequence[str], flags: Sequence[str]) -> list[str]:
    """The NVRTC command line: `flags` as given, less nvcc's host-only ones (-O<n>, -Xcompiler, -ccbin), with
    -isystem folders searched as include folders after the others."""
    options = [f"-arch={arch}", "--ptxas-options=-v"]
    options += [f"-I{d}" for d in (*include_dirs, *cuda_include_dirs())]
    if not any(f.startswith(("-std", "--std")) for f in flags):
        options.append("-std=c++17")  # what nvcc 13 uses, so both backends read the file alike
    words = iter(flags)
    for flag in words:
        name, equals, value = flag.partition("=")
        if name in _HOST_COMPILER_OPTIONS or name in _SYSTEM_INCLUDE_OPTIONS:
            value = value if equals else next(words, "")  # `-Xcompiler -fPIC`: the next word is its value
            if name in _SYSTEM_INCLUDE_OPTIONS and value:
                options.append(f"-I{value}")
        elif not _HOST_OPTIMISATION.match(flag):
            options.append(flag)
    return options


def nvrtc_rejects(flags: Sequence[str]) -> str | None:
    """Why NVRTC cannot compile with `flags` (an nvcc-only option that changes device code), or None."""
    refused = next((f for f in flags if f.split("=", 1)[0] in _NVCC_ONLY_OPTIONS), None)
    return f"NVRTC does not take {refused}" if refused else None


def _check(result: Any, call: str) -> None:
    from cuda.bindings import nvrtc

    if result != nvrtc.nvrtcResult.NVRTC_SUCCESS:
        raise NvrtcError(f"{call} failed: {result.name}")


@contextmanager
def _program(source: str, filename: str) -> Iterator[Any]:
    """An NVRTC program that is destroyed however the compile ends (many run at once in threads)."""
    from cuda.bindings import nvrtc

    result, program = nvrtc.nvrtcCreateProgram(source.encode(), filename.encode(), 0, [], [])
    _check(result, "nvrtcCreateProgram")
    try:
        yield program
    finally:
        nvrtc.nvrtcDestroyProgram(program)


def _read(size_call: Any, read_call: Any, program: Any) -> bytes:
    # A fresh bytearray: NVRTC writes into the buffer, and the `b" " * n` of NVIDIA's examples is, for
    # n == 1 (an empty log), CPython's shared one-byte object, which NVRTC then overwrites for everyone.
    result, size = size_call(program)
    _check(result, size_call.__name__)
    buffer = bytearray(size)
    (result,) = read_call(program, buffer)
    _check(result, read_call.__name__)
    return bytes(buffer)


def compile_with_nvrtc(
    source: str,
    kernel: str,
    *,
    filename: str,
    arch: str,
    include_dirs: Sequence[str],
    flags: Sequence[str],
) -> CompileResult:
    """Compile with NVRTC; bad CUDA gives ok=False with diagnostics, a broken NVRTC raises NvrtcError."""
    from cuda.bindings import nvrtc

    start = time.perf_counter()
    options = nvrtc_options(arch, include_dirs, flags)
    with _program(source, filename) as program:
        (result,) = nvrtc.nvrtcAddNameExpression(program, kernel.encode())
        _check(result, "nvrtcAddNameExpression")
        encoded = [o.encode() for o in options]
        (status,) = nvrtc.nvrtcCompileProgram(program, len(encoded), encoded)
        log_bytes = _read(nvrtc.nvrtcGetProgramLogSize, nvrtc.nvrtcGetProgramLog, program)
        # NUL-separated parts: ptxas's errors follow its info after a terminator of their own.
        log = log_bytes.replace(b"\0", b"").decode(errors="replace")
        diagnostics = parse_nvrtc_log(log, filename, kernel) + ptxas_diagnostics(log)
        cubin = b""
        lowered = ""
        if status == nvrtc.nvrtcResult.NVRTC_SUCCESS:
            cubin = _read(nvrtc.nvrtcGetCUBINSize, nvrtc.nvrtcGetCUBIN, program)
            result, name = nvrtc.nvrtcGetLoweredName(program, kernel.encode())
            _check(result, "nvrtcGetLoweredName")
            lowered = name.decode()
    seconds = time.perf_counter() - start
    failure = _failure(status, cubin, arch, options, diagnostics)
    if failure is not None:
        return CompileResult(False, None, (*diagnostics, *failure), "nvrtc", seconds, log)
    return compiled(kernel, lowered, cubin, "nvrtc", arch, flags, log, diagnostics, seconds)


def _failure(
    status: Any, cubin: bytes, arch: str, options: list[str], diagnostics: list[CompileDiagnostic]
) -> tuple[CompileDiagnostic, ...] | None:
    """The error to add when the compile failed and the log did not already say why; None on success."""
    from cuda.bindings import nvrtc

    if status == nvrtc.nvrtcResult.NVRTC_SUCCESS and cubin:
        return None
    if any(d.severity == "error" for d in diagnostics):
        return ()
    if status == nvrtc.nvrtcResult.NVRTC_ERROR_INVALID_OPTION:
        return (CompileDiagnostic("error", f"NVRTC rejected its options: {' '.join(options)}"),)
    if status == nvrtc.nvrtcResult.NVRTC_SUCCESS:  # a virtual arch such as compute_90 gives PTX only
        return (
            CompileDiagnostic("error", f"NVRTC made no cubin for arch {arch!r}; give a real one like sm_90"),
        )
    return (CompileDiagnostic("error", f"NVRTC failed: {status.name}"),)


def parse_nvrtc_log(log: str, filename: str, kernel: str) -> list[CompileDiagnostic]:
    """Diagnostics from NVRTC's text log (EDG's format), in order.

    A message is a header line, optional continuation lines, the source line echoed with a caret
    under the column, and optional "detected during instantiation ..." context. The caret gives the
    column that the header lacks.
    """
    diagnostics: list[CompileDiagnostic] = []
    header: re.Match[str] | None = None
    body: list[str] = []
    for line in [*log.splitlines(), ""]:
        match = _EDG_HEADER.match(line) or _NVRTC_OPTION_ERROR.match(line)
        if match or _LOG_NOISE.match(line) or not line.strip():
            if header is not None:
                diagnostics.append(_edg_diagnostic(header, body, filename, kernel))
            header, body = match, []
        elif header is not None:
            body.append(line)
    return diagnostics


def _edg_diagnostic(header: re.Match[str], body: list[str], filename: str, kernel: str) -> CompileDiagnostic:
    fields = header.groupdict()
    severity = _SEVERITY[fields["severity"]]
    caret = next((i for i, line in enumerate(body) if _CARET.match(line) and i > 0), None)
    extra = body if caret is None else body[: caret - 1] + body[caret + 1 :]
    message = "\n".join([fields["message"], *(line.strip() for line in extra)])
    if "file" not in fields:  # "nvrtc: error: ..." is about the command line
        return CompileDiagnostic(severity, message)
    if fields["file"] == NAME_MAP_FILE:
        return CompileDiagnostic(severity, f"kernel name {kernel!r}: {message}")
    line = int(fields["line"])
    column = None if caret is None else _caret_column(body[caret - 1], body[caret])
    file = filename if fields["file"] == filename else fields["file"]
    return CompileDiagnostic(severity, message, line, column, file)


def _caret_column(echo: str, caret: str) -> int | None:
    """1-based column in code points. EDG indents both lines by two and counts the caret in UTF-8 bytes."""
    offset = caret.index("^") - 2
    text = echo[2:].encode()
    if offset < 0 or offset > len(text):
        return None
    return len(text[:offset].decode(errors="ignore")) + 1
