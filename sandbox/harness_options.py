"""Compiler options that would break the harness, whoever passes them (a spec's `flags`, the CLI's
--nvcc-flag, the server's cudaAgent.nvccFlags, a compile_commands.json entry is filtered apart).

The harness owns the output (a cubin it loads), the target (the GPU it runs on), the language (CUDA) and
where flags come from; include folders have their own option everywhere, since they are made absolute.
Matched on the option's name (before any "="); `-ofile` and `-Idir` glue their value on, so their two
letters name them.
"""

from __future__ import annotations

_REASONS = {
    "cuda-agent chooses the output itself (a cubin that it loads)": (
        "-o", "--output-file", "-odir", "--output-directory", "-c", "--compile", "-cubin", "--cubin",
        "-ptx", "--ptx", "-fatbin", "--fatbin", "-optix-ir", "--optix-ir", "-E", "--preprocess",
        "-M", "-MM", "-MD", "-MMD", "-MF", "--generate-dependencies", "--generate-nonsystem-dependencies",
        "-lib", "--lib", "-link", "--link", "-dlink", "--device-link", "-dc", "--device-c", "-dw",
        "--device-w", "-rdc", "--relocatable-device-code", "-dlto", "--dlink-time-opt", "-shared",
        "--shared", "-run", "--run", "-cuda", "--cuda", "-dryrun", "--dryrun", "-keep", "--keep",
        "-V", "--version", "-h", "--help",
    ),
    "cuda-agent compiles for the GPU it runs on (use --arch)": (
        "-arch", "--gpu-architecture", "-code", "--gpu-code", "-gencode", "--generate-code",
    ),
    "cuda-agent compiles the file as CUDA (-x cu)": ("-x", "--x"),
    "flags are given one by one, not through a file": ("-optf", "--options-file"),
}  # fmt: skip
_BY_OPTION = {option: why for why, options in _REASONS.items() for option in options}
INCLUDE_OPTIONS = ("-I", "--include-path")


def harness_reason(flag: str, include_hint: str) -> str | None:
    """Why `flag` may not be passed, or None. `include_hint`: where include folders go instead (the
    spec's include_dirs, the CLI's -I/--include-dir)."""
    name = flag.split("=", 1)[0]
    glued = name[:2] if name[:2] in ("-I", "-o") else ""
    if name in INCLUDE_OPTIONS or glued == "-I":
        return f"give include folders as {include_hint}, which are made absolute"
    return _BY_OPTION.get(name) or _BY_OPTION.get(glued)
