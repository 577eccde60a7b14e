"""The compile environment of a user's file: include folders, macros and flags, wherever the compiler runs.

nvcc runs in a temporary folder and NVRTC compiles from memory, so every include folder is made absolute:
`cuda-agent check transpose.cu`, run from the file's own folder, must still find `#include "helper_cuda.h"`.
Where they come from, include folders in search order (macros and flags in the reverse order, so that the
nearer source wins: a later -D/-U overrides, a later -std= replaces an earlier one):

1. the file's own folder (the compiler would look there first for `#include "..."`);
2. the command line's -I/--include-dir, -D/--define, --nvcc-flag (or the server's cudaAgent.includeDirs,
   cudaAgent.defines, cudaAgent.nvccFlags), resolved where they were given;
3. the kernel's spec: `include_dirs` (relative to the file's folder) and `flags`;
4. the file's entry in a compile_commands.json (`compile_database_entry`): its -I, -isystem, -D, -U, -std=,
   -include, --expt-relaxed-constexpr, --extended-lambda, fast-math options, -maxrregcount, -Xcompiler,
   -Xptxas, -ccbin. Everything else there is the build's own business (its output, target architectures,
   dependency files, optimisation level, debug info) and conflicts with the harness, so it is dropped.
   A file with no entry takes the entry of a CUDA file in its own folder, as a new file usually gets the
   flags of its neighbours; with none there, the database gives nothing.

A PyTorch extension (`#include <torch/extension.h>`) is compiled without its host half
(agent/device_source.py) with the flags torch's cpp_extension gives nvcc: its `__CUDA_NO_HALF_*` macros
(they change which `__half` operators and conversions exist, so kernels must be read as torch builds them),
--expt-relaxed-constexpr and its C++ standard. torch's full headers take ~28 s under nvcc and need CUDA
library headers (cusparse.h) that a CPU-only torch and a bare toolkit lack; so the kernels are compiled
first with no torch header at all (~0.5 s), and only if that fails, again with a prelude of torch's
device-side headers (at::Half, PackedTensorAccessor, gpuAtomicAdd, CUDA_KERNEL_LOOP; ~1.5 s). Both go to
nvcc: NVRTC has no host standard library for these headers and rejects --expt-relaxed-constexpr.
"""

from __future__ import annotations

import ast
import functools
import hashlib
import importlib.util
import json
import os
import re
import shlex
import shutil
import tempfile
import threading
from collections.abc import Iterator, Sequence
from dataclasses import dataclass, replace
from pathlib import Path

from cuda_agent.agent.constant_inputs import constant_inputs
from cuda_agent.agent.device_source import device_source, includes_torch
from cuda_agent.sandbox.compile import Backend, compile_kernel
from cuda_agent.sandbox.harness_options import harness_reason
from cuda_agent.sandbox.reports import CompileDiagnostic, CompileResult

DATABASE = "compile_commands.json"
_RELAXED_CONSTEXPR = "--expt-relaxed-constexpr"  # device code may call constexpr host functions: keep them


@dataclass(frozen=True)
class CompileEnvironment:
    """What a compile of one file gets besides its source: plain data, part of every result's cache key."""

    include_dirs: tuple[str, ...] = ()  # absolute, searched in this order (-I)
    defines: tuple[str, ...] = ()  # -DNAME[=VALUE] and -UNAME, in the order they apply, before the flags
    flags: tuple[str, ...] = ()  # every other compiler argument, one word each
    warnings: tuple[str, ...] = ()  # shown among the compile's diagnostics: a broken database, a lost folder
    database: str | None = None  # the compile_commands.json whose entry was used, for a person

    def compiler_flags(self) -> tuple[str, ...]:
        return (*self.defines, *self.flags)

    def searching_first(self, folder: str) -> CompileEnvironment:
        """`folder` searched before the others (a hand-written rewrite's own folder, `cuda-agent compare`)."""
        return replace(self, include_dirs=_unique((os.path.abspath(folder), *self.include_dirs)))


def environment_for(
    path: str | os.PathLike[str],
    cli_includes: Sequence[str] = (),
    cli_defines: Sequence[str] = (),
    cli_flags: Sequence[str] = (),
    *,
    spec_include_dirs: Sequence[str] = (),
    spec_flags: Sequence[str] = (),
) -> CompileEnvironment:
    """The environment of the file at `path` (module docstring for the order). `cli_includes` are already
    absolute (resolved where they were typed), `cli_defines` are NAME[=VALUE]; a spec's `include_dirs` are
    relative to the file's folder. -D and -U among the flags join the macros, in the same order."""
    file = os.path.abspath(path)
    folder = os.path.dirname(file)
    written = [
        *(os.path.abspath(d) for d in cli_includes),
        *(os.path.normpath(os.path.join(folder, d)) for d in spec_include_dirs),
    ]
    database = compile_database_entry(file)
    missing = [f"include folder {d} does not exist" for d in written if not os.path.isdir(d)]
    spec_macros, spec_others = _macros_apart(spec_flags)
    cli_macros, cli_others = _macros_apart((*(f"-D{d}" for d in cli_defines), *cli_flags))
    return CompileEnvironment(
        include_dirs=_unique((folder, *written, *database.include_dirs)),
        defines=(*database.defines, *spec_macros, *cli_macros),
        flags=_last_standard_only((*database.flags, *spec_others, *cli_others)),
        warnings=_unique((*database.warnings, *missing)),
        database=database.database,
    )


def _macros_apart(flags: Sequence[str]) -> tuple[tuple[str, ...], tuple[str, ...]]:
    """(-D and -U options, as one word each; the other flags): macros apply in their own order, first."""
    macros: list[str] = []
    others: list[str] = []
    words = iter(flags)
    for flag in words:
        if flag in ("-D", "-U"):  # a spec's ["-D", "TILE=32"]: the value is the next word
            macros.append(flag + next(words, ""))
        elif flag.startswith(("-D", "-U")):
            macros.append(flag)
        else:
            others.append(flag)
    return tuple(macros), tuple(others)


def compile_in(
    environment: CompileEnvironment,
    source: str,
    kernel: str,
    *,
    filename: str,
    arch: str,
    flags: Sequence[str] = (),
) -> CompileResult:
    """Compile `kernel` of `source` (the whole file) in `environment`, with a candidate's own `flags` last:
    the device side of the file (host functions left out), a PyTorch extension's without torch (module
    docstring). The environment's warnings come back among the diagnostics."""
    all_flags = _last_standard_only((*environment.compiler_flags(), *flags))
    # the mask a host fills with cudaMemcpyToSymbol: filled by the sandbox instead of left at zero
    constants = constant_inputs(source)

    def run(text: str, run_flags: Sequence[str], backend: Backend) -> CompileResult:
        result = compile_kernel(
            text, kernel, filename=filename, arch=arch, include_dirs=environment.include_dirs,
            flags=run_flags, backend=backend,
        )  # fmt: skip
        if result.kernel is None or not constants:
            return result
        return replace(result, kernel=replace(result.kernel, constants=constants))

    if not includes_torch(source):
        text = device_source(source, relaxed_constexpr=_RELAXED_CONSTEXPR in all_flags)
        return _with_warnings(run(text, all_flags, "auto"), environment.warnings)
    build = torch_build()
    torch_flags = _last_standard_only((*build.flags, *all_flags))  # the user's -std= and -U win over torch's
    text = device_source(source, without_torch=True, relaxed_constexpr=_RELAXED_CONSTEXPR in torch_flags)
    headers = torch_device_headers()
    bare = run(text, (*torch_flags, f"--pre-include={headers.stub}"), "nvcc")
    if bare.ok:
        return _with_warnings(bare, environment.warnings)
    if not build.include_dirs:
        note = CompileDiagnostic(
            "note", "PyTorch's headers were not found (torch is not installed in this Python): the "
            "extension's kernels were compiled without them, so the torch types they use are undefined",
        )  # fmt: skip
        return _with_warnings(replace(bare, diagnostics=(*bare.diagnostics, note)), environment.warnings)
    system = tuple(f"-isystem={d}" for d in build.include_dirs)  # -isystem: no warnings from torch's headers
    with_headers = run(text, (*torch_flags, *system, f"--pre-include={headers.prelude}"), "nvcc")
    log = f"--- without torch's headers ({bare.seconds:.2f} s) ---\n{bare.log}\n--- with them ---\n"
    log += with_headers.log
    result = replace(with_headers, seconds=bare.seconds + with_headers.seconds, log=log)
    return _with_warnings(result, environment.warnings)


def _with_warnings(result: CompileResult, warnings: Sequence[str]) -> CompileResult:
    if not warnings:
        return result
    added = tuple(CompileDiagnostic("warning", w) for w in warnings)
    return replace(result, diagnostics=(*added, *result.diagnostics))


def _unique(items: Sequence[str]) -> tuple[str, ...]:
    return tuple(dict.fromkeys(items))


def _last_standard_only(flags: Sequence[str]) -> tuple[str, ...]:
    """The flags with every -std= but the last dropped: nvcc warns about a second one, and the later source
    (the command line over compile_commands.json, a spec over torch's default) is the one meant."""
    standards = [i for i, f in enumerate(flags) if f.startswith(("-std=", "--std="))]
    return tuple(f for i, f in enumerate(flags) if i not in standards[:-1])


# -- checking what a person gives (the CLI's options, the server's settings) ------------------------------

_MACRO_NAME = re.compile(r"^[A-Za-z_]\w*(\([\w\s,.]*\))?$")  # NAME, or a function-like NAME(a, b)


def flag_problem(flag: str) -> str | None:
    """Why `flag` cannot be passed to the compiler, or None when it can."""
    if not flag.startswith("-"):
        return f"{flag!r} is not an option (options start with '-'; pass it as --nvcc-flag=-O3)"
    if any(character.isspace() for character in flag):
        return (
            f"{flag!r} holds a space: each flag is one command-line word (give an option and its value as "
            "one, --nvcc-flag=-Xptxas=-v, or as two flags)"
        )
    why = harness_reason(flag, "include folders (-I/--include-dir, cudaAgent.includeDirs)")
    return f"{flag!r} is not allowed: {why}" if why else None


def define_problem(define: str) -> str | None:
    """Why `define` (NAME or NAME=VALUE, as after -D) is not a macro definition, or None."""
    name = define.split("=", 1)[0]
    if not _MACRO_NAME.match(name):
        return f"{define!r} does not define a macro: write NAME or NAME=VALUE"
    return None


def absolute_include_dir(folder: str, base: str | os.PathLike[str] | None = None) -> str:
    """`folder` made absolute against `base` (default: the current directory); ValueError if it is not one."""
    resolved = os.path.normpath(os.path.join(os.fspath(base) if base is not None else os.getcwd(), folder))
    if not os.path.isdir(resolved):
        what = "not a folder" if os.path.exists(resolved) else "no such folder"
        raise ValueError(f"{folder!r}: {what}" + (f" ({resolved})" if resolved != folder else ""))
    return resolved


# -- compile_commands.json ------------------------------------------------------------------------------


@dataclass(frozen=True)
class _Entry:
    file: str  # absolute, normalised
    directory: str  # absolute
    arguments: tuple[str, ...]


def compile_database_entry(file: str) -> CompileEnvironment:
    """The device-side flags of `file` (absolute) from the nearest compile_commands.json with an entry for
    it (or, failing that, for a CUDA file in its folder): searched in the file's folder and each parent up
    to the filesystem root or a folder holding `.git`, as `compile_commands.json` and
    `build/compile_commands.json`. A database that cannot be read gives a warning, never an exception."""
    warnings: list[str] = []
    sibling: tuple[str, _Entry] | None = None
    for database in _databases(file):
        try:
            entries, problem = _read_database(str(database), *_stamp(database))
        except OSError as exc:  # removed since it was found (a build regenerating it)
            entries, problem = (), f"{database}: cannot be read ({exc}); its flags are not used"
        if problem:
            warnings.append(problem)
            continue
        exact = next((e for e in entries if _same_file(e.file, file)), None)
        if exact is not None:
            return replace(device_flags(exact.arguments, exact.directory), warnings=tuple(warnings),
                           database=str(database))  # fmt: skip
        if sibling is None and (neighbour := _neighbour(entries, file)) is not None:
            sibling = (str(database), neighbour)
    if sibling is not None:
        database, entry = sibling
        return replace(device_flags(entry.arguments, entry.directory), warnings=tuple(warnings),
                       database=f"{database} (the entry of {entry.file})")  # fmt: skip
    return CompileEnvironment(warnings=tuple(warnings))


def _databases(file: str) -> Iterator[Path]:
    folder = Path(file).parent
    while True:
        for candidate in (folder / DATABASE, folder / "build" / DATABASE):
            if candidate.is_file():
                yield candidate
        if (folder / ".git").exists() or folder.parent == folder:
            return
        folder = folder.parent


def _stamp(path: Path) -> tuple[int, int]:
    """What says the file changed (a build regenerates it): read again only then."""
    status = path.stat()
    return status.st_mtime_ns, status.st_size


def _same_file(a: str, b: str) -> bool:
    return a == b or os.path.realpath(a) == os.path.realpath(b)


def _neighbour(entries: Sequence[_Entry], file: str) -> _Entry | None:
    """The first entry of a CUDA file in `file`'s folder, else of any file there."""
    folder = os.path.dirname(file)
    here = [e for e in entries if os.path.dirname(e.file) == folder]
    return next((e for e in here if e.file.endswith((".cu", ".cuh"))), here[0] if here else None)


@functools.lru_cache(maxsize=16)
def _read_database(path: str, _mtime_ns: int, _size: int) -> tuple[tuple[_Entry, ...], str | None]:
    """The entries of a compile_commands.json, or why it cannot be used. Entries without a file, a directory
    or a command are skipped; they say nothing about a file."""
    try:
        with open(path, encoding="utf-8") as handle:
            data = json.load(handle)
    except (OSError, UnicodeDecodeError) as exc:
        return (), f"{path}: cannot be read ({exc}); its flags are not used"
    except json.JSONDecodeError as exc:
        return (), f"{path}: not valid JSON ({exc}); its flags are not used"
    if not isinstance(data, list):
        return (), f"{path}: expected a list of entries, got {type(data).__name__}; its flags are not used"
    base = os.path.dirname(path)
    entries = []
    for item in data:
        entry = _entry(item, base)
        if entry is not None:
            entries.append(entry)
    return tuple(entries), None


def _entry(item: object, base: str) -> _Entry | None:
    if not isinstance(item, dict):
        return None
    directory, file = item.get("directory"), item.get("file")
    if not isinstance(directory, str) or not isinstance(file, str):
        return None
    arguments = item.get("arguments")
    if not (isinstance(arguments, list) and all(isinstance(a, str) for a in arguments)):
        command = item.get("command")
        if not isinstance(command, str):
            return None
        try:
            arguments = shlex.split(command)
        except ValueError:  # an unbalanced quote: no reliable words
            return None
    directory = os.path.normpath(os.path.join(base, directory))
    return _Entry(os.path.normpath(os.path.join(directory, file)), directory, tuple(arguments))


# Options kept from a database entry that take a value (attached with "=", or the next word), by spelling,
# with the spelling passed on. -I, -D and -U may also glue it on (-Iinclude, -DNDEBUG), as may -isystem.
_KEPT_WITH_VALUE = {
    "-I": "-I", "--include-path": "-I",
    "-isystem": "-isystem", "--system-include": "-isystem",
    "-D": "-D", "--define-macro": "-D",
    "-U": "-U", "--undefine-macro": "-U",
    "-include": "--pre-include", "--pre-include": "--pre-include",
    "-std": "-std", "--std": "-std",
    "-Xcompiler": "-Xcompiler", "--compiler-options": "-Xcompiler",
    "-Xptxas": "-Xptxas", "--ptxas-options": "-Xptxas",
    "-ccbin": "-ccbin", "--compiler-bindir": "-ccbin",
    "-maxrregcount": "-maxrregcount", "--maxrregcount": "-maxrregcount",
    "-ftz": "--ftz", "--ftz": "--ftz",
    "-prec-div": "--prec-div", "--prec-div": "--prec-div",
    "-prec-sqrt": "--prec-sqrt", "--prec-sqrt": "--prec-sqrt",
    "-fmad": "--fmad", "--fmad": "--fmad",
    "-diag-suppress": "--diag-suppress", "--diag-suppress": "--diag-suppress",
}  # fmt: skip
_KEPT_ALONE = {
    "--expt-relaxed-constexpr": _RELAXED_CONSTEXPR, "-expt-relaxed-constexpr": _RELAXED_CONSTEXPR,
    "--expt-extended-lambda": "--extended-lambda", "-expt-extended-lambda": "--extended-lambda",
    "--extended-lambda": "--extended-lambda", "-extended-lambda": "--extended-lambda",
    "--use_fast_math": "--use_fast_math", "-use_fast_math": "--use_fast_math",
    "--restrict": "--restrict", "-restrict": "--restrict",
}  # fmt: skip
# Dropped options whose value is the next word when not attached: that word must not be read as an option.
_DROPPED_WITH_VALUE = frozenset(
    {
        "-o", "--output-file", "-x", "--x", "-arch", "--gpu-architecture", "-code", "--gpu-code", "-gencode",
        "--generate-code", "-Xcudafe", "-Xlinker", "--linker-options", "-Xnvlink", "--nvlink-options",
        "-Xarchive", "--archive-options", "-Xfatbin", "--fatbin-options", "-MF", "-MT", "-MQ", "-odir",
        "--output-directory", "--dependency-output", "-L", "--library-path", "-l", "--library",
        "--default-stream", "-t", "--threads", "-split-compile", "--split-compile", "-time", "--time",
    }
)  # fmt: skip
_RESPONSE_FILE_OPTIONS = frozenset({"--options-file", "-optf"})


def device_flags(arguments: Sequence[str], directory: str) -> CompileEnvironment:
    """What a compile command (its words, compiler first) says about compiling a file's device code,
    relative paths resolved against `directory`. Response files (`@file`, --options-file) are read in."""
    words = list(_expanded(arguments[1:], directory))
    include_dirs: list[str] = []
    defines: list[str] = []
    flags: list[str] = []
    position = 0
    while position < len(words):
        word = words[position]
        position += 1
        option, value = _split(word)
        if option in _KEPT_ALONE:
            flags.append(_KEPT_ALONE[option])
            continue
        if option in _DROPPED_WITH_VALUE or option in _KEPT_WITH_VALUE:
            if value is None and position < len(words):
                value, position = words[position], position + 1
            if option in _DROPPED_WITH_VALUE or value is None:
                continue
            kept = _KEPT_WITH_VALUE[option]
            if kept == "-I":
                include_dirs.append(os.path.normpath(os.path.join(directory, value)))
            elif kept in ("-D", "-U"):
                defines.append(f"{kept}{value}")
            elif kept in ("-isystem", "--pre-include"):
                flags.append(f"{kept}={os.path.normpath(os.path.join(directory, value))}")
            elif kept == "-ccbin":
                # Another machine's host compiler would stop nvcc here: only one that exists is kept.
                if shutil.which(value) or os.path.isfile(os.path.join(directory, value)):
                    flags.append(f"-ccbin={value}")
            else:
                flags.append(f"{kept}={value}")
        # Anything else, the source file included, is the build's own: dropped.
    return CompileEnvironment(tuple(include_dirs), tuple(defines), tuple(flags))


def _split(word: str) -> tuple[str, str | None]:
    """(option, attached value or None): `-Iinc` -> ("-I", "inc"), `-std=c++17` -> ("-std", "c++17")."""
    if not word.startswith("--"):
        for glued in ("-isystem", "-I", "-D", "-U"):  # gcc's spellings, which glue the value on
            if word.startswith(glued) and len(word) > len(glued):
                rest = word[len(glued) :]
                return glued, rest[1:] if rest.startswith("=") and glued != "-D" else rest
    name, equals, value = word.partition("=")
    return (name, value) if equals else (word, None)


def _expanded(words: Sequence[str], directory: str) -> Iterator[str]:
    """The words with response files (`@file`, `--options-file file`) replaced by theirs, one level deep."""
    position = 0
    while position < len(words):
        word = words[position]
        position += 1
        name, value = _split(word)
        path = None
        if word.startswith("@") and len(word) > 1:
            path = word[1:]
        elif name in _RESPONSE_FILE_OPTIONS:
            if value is None and position < len(words):
                value, position = words[position], position + 1
            path = value
        if path is None:
            yield word
            continue
        try:
            yield from shlex.split(Path(directory, path).read_text(encoding="utf-8"))
        except (OSError, ValueError):  # a build's temporary file, long gone: its words are lost
            continue


# -- PyTorch ---------------------------------------------------------------------------------------------


@dataclass(frozen=True)
class TorchBuild:
    """How torch's cpp_extension builds an extension's CUDA code: its include folders (none: torch is not
    installed) and the nvcc flags that change what the code means."""

    include_dirs: tuple[str, ...]
    flags: tuple[str, ...]


# Where torch is not installed: cpp_extension's COMMON_NVCC_FLAGS as of torch 2.13, and nvcc's own C++17.
_TORCH_NVCC_FLAGS = (
    "-D__CUDA_NO_HALF_OPERATORS__",
    "-D__CUDA_NO_HALF_CONVERSIONS__",
    "-D__CUDA_NO_BFLOAT16_CONVERSIONS__",
    "-D__CUDA_NO_HALF2_OPERATORS__",
    "--expt-relaxed-constexpr",
)
_TORCH_STANDARD = "c++17"


@functools.cache
def torch_build() -> TorchBuild:
    """The installed torch's include folders and nvcc flags, found without importing torch (seconds and a
    gigabyte the language server should not spend): its folder from the import system, the flags from
    `torch/utils/cpp_extension.py` read as text (COMMON_NVCC_FLAGS, the highest -std=c++NN it passes)."""
    spec = importlib.util.find_spec("torch")
    if spec is None or not spec.submodule_search_locations:
        return TorchBuild((), (*_TORCH_NVCC_FLAGS, f"-std={_TORCH_STANDARD}"))
    root = Path(next(iter(spec.submodule_search_locations)))
    include = root / "include"
    folders = [include, include / "torch" / "csrc" / "api" / "include"]
    flags, standard = _TORCH_NVCC_FLAGS, _TORCH_STANDARD
    try:
        text = (root / "utils" / "cpp_extension.py").read_text(encoding="utf-8")
    except OSError:
        text = ""
    read = _python_list(text, "COMMON_NVCC_FLAGS")
    if read:
        flags = tuple(read)
    versions = [int(v) for v in re.findall(r"-std=c\+\+(\d+)", text)]
    if versions:
        standard = f"c++{max(versions)}"
    existing = tuple(str(f) for f in folders if f.is_dir())
    return TorchBuild(existing if include.is_dir() else (), (*flags, f"-std={standard}"))


def _python_list(text: str, name: str) -> list[str] | None:
    """The list of strings assigned to `name` at a module's top level, or None."""
    try:
        module = ast.parse(text)
    except SyntaxError:
        return None
    for statement in module.body:
        if isinstance(statement, ast.Assign) and any(
            isinstance(t, ast.Name) and t.id == name for t in statement.targets
        ):
            try:
                value = ast.literal_eval(statement.value)
            except ValueError:
                return None
            if isinstance(value, list) and all(isinstance(v, str) for v in value):
                return value
    return None


# The names an extension's device side may still mention once torch's includes are left out: namespaces
# named in using-directives and aliases (`using namespace at;`, `namespace py = pybind11;`) and the Tensor
# class of a `using torch::Tensor;`. As torch declares them, so the prelude below can follow.
_TORCH_STUB = """\
// cuda-agent: what a PyTorch extension's kernels may name once torch's own headers are left out.
#pragma once
namespace c10 {}
namespace at { using namespace c10; class Tensor; }
namespace torch { using namespace at; }
namespace pybind11 {}
"""
# torch's device-side headers a kernel uses, each only where this torch has it.
_TORCH_PRELUDE_HEADERS = (
    ("c10/macros/Macros.h", "C10_HOST_DEVICE, C10_LAUNCH_BOUNDS_*, CUDA_KERNEL_ASSERT"),
    ("c10/util/Half.h", "at::Half"),
    ("c10/util/BFloat16.h", "at::BFloat16"),
    ("c10/util/complex.h", "c10::complex"),
    ("ATen/core/TensorAccessor.h", "PackedTensorAccessor32/64, RestrictPtrTraits"),
    ("ATen/OpMathType.h", "at::opmath_type"),
    ("ATen/cuda/detail/KernelUtils.h", "CUDA_KERNEL_LOOP, GET_BLOCKS"),
    ("ATen/cuda/Atomic.cuh", "gpuAtomicAdd"),
    ("ATen/cuda/DeviceUtils.cuh", "WARP_SHFL, WARP_SHFL_DOWN"),
)


@dataclass(frozen=True)
class TorchDeviceHeaders:
    stub: str  # absolute path: the namespaces alone
    prelude: str  # absolute path: the stub and torch's device-side headers


@functools.cache
def torch_device_headers() -> TorchDeviceHeaders:
    """The two headers a PyTorch extension's kernels are compiled with (`--pre-include`), written once into
    the user's cache folder under names that hash their text (a stable path keeps compile results cached)."""
    stub = _TORCH_STUB
    prelude_lines = [
        "// cuda-agent: torch's device-side headers for a PyTorch extension's kernels.",
        "#pragma once",
        *(
            f"#if __has_include(<{header}>)\n#include <{header}>  // {what}\n#endif"
            for header, what in _TORCH_PRELUDE_HEADERS
        ),
        _TORCH_STUB.split("#pragma once\n", 1)[1],
    ]
    return TorchDeviceHeaders(
        _cached_header("torch_stub", stub), _cached_header("torch_prelude", "\n".join(prelude_lines))
    )


def _cached_header(name: str, text: str) -> str:
    digest = hashlib.sha256(text.encode()).hexdigest()[:16]
    user = getattr(os, "getuid", lambda: "user")()
    for folder in (_user_cache_folder(), Path(tempfile.gettempdir()) / f"cuda-agent-{user}"):
        path = folder / f"{name}-{digest}.h"
        try:
            if not path.is_file():
                folder.mkdir(parents=True, exist_ok=True, mode=0o700)
                partial = path.with_suffix(f".{os.getpid()}.{threading.get_ident()}.tmp")
                partial.write_text(text, encoding="utf-8")
                os.replace(partial, path)  # atomic: a compile in another thread never reads half a file
            return str(path)
        except OSError:  # a read-only home: the next folder
            continue
    raise OSError(f"cannot write {name}.h into a cache or temporary folder")


def _user_cache_folder() -> Path:
    import platformdirs

    return Path(platformdirs.user_cache_dir("cuda-agent")) / "headers"
