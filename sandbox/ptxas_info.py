"""Read what ptxas says with `-v`: per-kernel resources, and its own errors and warnings.

NVRTC (`--ptxas-options=-v`) and nvcc (`-Xptxas -v`) print the same report, NVRTC with a
`ptxas         .` prefix on the stack line. A file holds several kernels, so the report is
read per entry function and the caller asks for the one it compiled.
"""

from __future__ import annotations

import re
from collections.abc import Sequence
from typing import Literal

from cuda_agent.sandbox.cubin import resource_usage
from cuda_agent.sandbox.plan import CompiledKernel, ResourceUsage
from cuda_agent.sandbox.reports import CompileDiagnostic, CompileResult

_ENTRY = re.compile(r"Compiling entry function '([^']+)'")
_PROPERTIES = re.compile(r"Function properties for (\S+)")
_STACK = re.compile(r"(\d+) bytes stack frame, (\d+) bytes spill stores, (\d+) bytes spill loads")
_REGISTERS = re.compile(r"Used (\d+) registers")
_SHARED = re.compile(r"(\d+) bytes smem")
_MESSAGE = re.compile(r"^\s*ptxas\s+(error|fatal|warning)\s*:\s*(.*?)\s*$")


def parse_resource_usage(log: str, symbol: str) -> ResourceUsage:
    """Resources of entry function `symbol` (its lowered name); fields stay None when ptxas said nothing."""
    entry: str | None = None  # the "Used N registers" line belongs to the entry being compiled
    properties: str | None = None  # the stack line belongs to the last "Function properties for"
    usage: dict[str, int | None] = {}
    for line in log.splitlines():
        if match := _ENTRY.search(line):
            entry = match.group(1)
        elif match := _PROPERTIES.search(line):
            properties = match.group(1)
        elif (match := _STACK.search(line)) and properties == symbol:
            stack, stores, loads = (int(g) for g in match.groups())
            usage.update(stack_bytes=stack, spill_store_bytes=stores, spill_load_bytes=loads)
        elif (match := _REGISTERS.search(line)) and entry == symbol:
            shared = _SHARED.search(line)
            # ptxas leaves "bytes smem" out when the kernel has no static shared memory.
            usage.update(registers=int(match.group(1)), shared_bytes=int(shared.group(1)) if shared else 0)
    return ResourceUsage(**usage)


def kernel_resources(log: str, cubin: bytes, symbol: str) -> ResourceUsage:
    """What ptxas reported for `symbol`, else what the cubin itself records (registers, stack frame)."""
    usage = parse_resource_usage(log, symbol)
    return usage if usage.registers is not None else resource_usage(cubin, symbol)


def compiled(
    kernel: str, lowered: str, cubin: bytes, backend: Literal["nvrtc", "nvcc"], arch: str,
    flags: Sequence[str], log: str, diagnostics: Sequence[CompileDiagnostic], seconds: float,
) -> CompileResult:  # fmt: skip
    """A successful compile's result, the same for both compilers: the cubin, its symbol, its resources."""
    kernel_object = CompiledKernel(
        name=kernel,
        lowered_name=lowered,
        cubin=cubin,
        backend=backend,
        arch=arch,
        flags=tuple(flags),
        resources=kernel_resources(log, cubin, lowered),
    )
    return CompileResult(True, kernel_object, tuple(diagnostics), backend, seconds, log)


def ptxas_diagnostics(log: str) -> list[CompileDiagnostic]:
    """ptxas errors and warnings (e.g. too much shared memory): plain text, with no source line."""
    diagnostics = []
    for line in log.splitlines():
        if match := _MESSAGE.match(line):
            severity = "warning" if match.group(1) == "warning" else "error"
            diagnostics.append(CompileDiagnostic(severity, f"ptxas: {match.group(2)}"))
    return diagnostics
