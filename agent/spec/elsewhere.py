"""Kernels launched from another file: a kernel defined in a header (`silu_mul.cuh`) and launched from the
`.cu` that includes it, or from a runner file next to it (an SGEMM tutorial's `runner.cu`).

The launching file's host code is read as if the header's declarations were at its top (its #defines,
constants and type aliases: `using half_t = __half;` lives with the kernels), and the spec comes from
those launches the way it comes from launches in the kernel's own file; the note names the file.
Files are looked for in the kernel's folder and the folder above it, and each is read once per size and
modification time (the kernels it launches kept with it), so the language server does not read the
folder again on every keystroke.
"""

from __future__ import annotations

import hashlib
import os
import re
from pathlib import Path

from cuda_agent.agent.kernels import Kernel
from cuda_agent.agent.memo import BoundedMemo
from cuda_agent.agent.parsing import parse_cuda
from cuda_agent.agent.spec.model import KernelSpec
from cuda_agent.agent.spec.program import ProgramHost, read_program_points, spec_from_points
from tree_sitter import Tree

SOURCE_SUFFIXES = frozenset({".cu", ".cuh", ".cpp", ".cc", ".cxx", ".h", ".hpp", ".cuhpp"})
MAX_FILES = 400  # a folder with more is a build or data folder, not a project's sources
MAX_BYTES = 2_000_000

_LAUNCHED = re.compile(rb"\b([A-Za-z_]\w*)\s*(?:<[^;{}()<>]*(?:<[^;{}()<>]*>[^;{}()<>]*)*>\s*)?<<<")
_FILES: BoundedMemo[tuple[object, ...], tuple[bytes, tuple[str, ...]]] = BoundedMemo(MAX_FILES)
_INDEXES: BoundedMemo[tuple[object, ...], dict[str, tuple[tuple[Path, bytes], ...]]] = BoundedMemo(64)
# A folder's source files by its modification time, which adding, removing or renaming one changes: the
# language server looks in the file's folder and the one above on every edit, and the one above may hold
# a thousand entries.
_LISTINGS: BoundedMemo[tuple[str, int], tuple[str, ...]] = BoundedMemo(64)


class Neighbours:
    """The source files next to one file that launch kernels, indexed by the kernel they launch. Made once
    per read of the file (a folder listing; the files are read again only when the listing changes)."""

    def __init__(self, path: Path) -> None:
        self.path = path
        self._launched: dict[str, list[tuple[Path, bytes]]] | None = None

    def launching(self, kernel: str) -> list[tuple[Path, bytes]]:
        """(file, its bytes) for each file in the folder, then the one above, that launches `kernel`."""
        return self._index().get(kernel, [])

    def names(self) -> frozenset[str]:
        """The kernels that those files launch."""
        return frozenset(self._index())

    def _index(self) -> dict[str, list[tuple[Path, bytes]]]:
        if self._launched is None:
            self._launched = {}
            # A buffer with no file of its own (untitled) has no folder to look in.
            here = self.path.absolute().parent if self.path.is_file() else None
            own = self.path.resolve() if here else None
            for folder in dict.fromkeys((here, here.parent) if here else ()):
                # The file's own launches are its own host code's: left out, and by file, not by launch
                # (resolving a path for each of a big file's launches took most of an edit's analysis).
                for name, files in _launches_in(folder, own).items():
                    self._launched.setdefault(name, []).extend(files)
        return self._launched


def _launches_in(folder: Path, own: Path | None) -> dict[str, tuple[tuple[Path, bytes], ...]]:
    """Kernel name -> the files of `folder` but `own` that launch it. Each file is read once per (size,
    mtime): a project folder where one file changes is not read again whole; and the index is kept per
    (name, size, mtime) of its source files, which an edit in the editor (not yet saved) leaves as they
    were."""
    try:
        names = _LISTINGS.get_or_make((str(folder), os.stat(folder).st_mtime_ns), lambda: _sources(folder))
        if len(names) > MAX_FILES:
            return {}
        entries = tuple(
            (name, (found := os.stat(folder / name)).st_size, found.st_mtime_ns) for name in names
        )
    except OSError:
        return {}
    return _INDEXES.get_or_make((str(folder), str(own), entries), lambda: _index(folder, own, entries))


def _sources(folder: Path) -> tuple[str, ...]:
    """The names of the source files in `folder`."""
    return tuple(
        sorted(e.name for e in os.scandir(folder) if e.is_file() and Path(e.name).suffix in SOURCE_SUFFIXES)
    )


def _index(
    folder: Path, own: Path | None, entries: tuple[tuple[str, int, int], ...]
) -> dict[str, tuple[tuple[Path, bytes], ...]]:
    index: dict[str, list[tuple[Path, bytes]]] = {}
    for name, size, mtime in entries:
        path = folder / name
        if size > MAX_BYTES or path.resolve() == own:
            continue
        data, launched = _FILES.get_or_make((str(path), size, mtime), lambda path=path: _read(path))
        for kernel in launched:
            index.setdefault(kernel, []).append((path, data))
    return {name: tuple(files) for name, files in index.items()}


def _read(path: Path) -> tuple[bytes, tuple[str, ...]]:
    """A file's bytes and the kernels it launches (none when it launches nothing: its bytes are not kept)."""
    try:
        data = path.read_bytes()
    except OSError:
        return b"", ()
    if b"<<<" not in data:
        return b"", ()
    return data, tuple(dict.fromkeys(m.group(1).decode() for m in _LAUNCHED.finditer(data)))


_INFERRED: BoundedMemo[tuple[object, ...], tuple[KernelSpec | None, str]] = BoundedMemo()


def infer_from_elsewhere(
    neighbours: Neighbours, kernel: Kernel, tree: Tree, own: ProgramHost
) -> tuple[KernelSpec | None, str]:
    """The spec that another file's launches of `kernel` imply (`own`: the kernel's file's host facts,
    `tree` its parse), or (None, why not). Kept per kernel text, the header's declarations and the
    launching files' bytes: typing in the header re-reads the other files only when they could matter."""
    files = neighbours.launching(kernel.name)
    key = (
        own.data[kernel.start_byte : kernel.end_byte],
        own.globals_digest,
        tuple((str(path), hashlib.blake2b(data, digest_size=16).digest()) for path, data in files),
    )
    return _INFERRED.get_or_make(key, lambda: _infer(files, kernel, tree, own))


def _infer(
    files: list[tuple[Path, bytes]], kernel: Kernel, tree: Tree, own: ProgramHost
) -> tuple[KernelSpec | None, str]:
    reasons = []
    for other, data in files:
        host = ProgramHost(parse_cuda(data), data, place=f" of {other.name}")
        host.include(own)
        points, why = read_program_points(kernel, host)
        if not points:
            reasons.append(f"{other.name}: {why}")
            continue
        spec, why = spec_from_points(kernel, tree, points, host.typedefs)
        if spec is not None:
            return spec, spec.inference_note
        reasons.append(f"{other.name}: {why}")
    if not reasons:
        return None, "nothing in the file or next to it launches it"
    return None, "; ".join(reasons)
