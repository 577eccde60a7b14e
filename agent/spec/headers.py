"""The project's own headers a file includes (`#include "gemm.cuh"`), read for what inference needs.

Benchmark suites and course projects keep their sizes, element types and block shapes in a header next
to the kernel (`#define NI 4096`, `#define DATA_TYPE float`, `typedef float floatX;`), and the launch in
the .cu file reads them. Quoted includes are followed from the including file's folder; a header not
found there is left out (the compile still finds it through its include paths). System headers
(`<...>`) are never read.
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

from cuda_agent.agent.memo import BoundedMemo

MAX_HEADERS = 32  # a file's own headers, transitively: enough for any project's, bounded for a cycle
MAX_DEPTH = 4
MAX_BYTES = 1 << 20  # a generated header larger than this is not what holds the sizes


@dataclass(frozen=True)
class Header:
    path: Path
    data: bytes


_READ: BoundedMemo[tuple[str, int, int], bytes] = BoundedMemo(256)


def local_headers(path: Path, data: bytes | str) -> tuple[Header, ...]:
    """The quoted headers the file includes that exist next to it (and those they include), nearest
    first; empty for a file that is not on disk (a buffer the editor has not saved anywhere)."""
    return tuple(Header(Path(name), contents) for name, contents in _walk(path, data))


def headers_stamp(path: Path, data: bytes | str) -> tuple[tuple[str, int, int], ...]:
    """What the file's own headers are now, cheaply (their paths, times and sizes): a memo of what was
    read through them must be dropped when one changes, as the file's text has not."""
    stamp = []
    for name, contents in _walk(path, data):
        try:
            status = Path(name).stat()
        except OSError:
            continue
        stamp.append((name, status.st_mtime_ns, len(contents)))
    return tuple(stamp)


def _walk(path: Path, data: bytes | str) -> list[tuple[str, bytes]]:
    """(path, contents) of each quoted include found from the file, breadth first, read once each.
    Found by their lines, not a parse: an include inside `#if 0` is read too, harmlessly."""
    found: list[tuple[str, bytes]] = []
    seen = {_key(path)}
    pending: list[tuple[Path, bytes | str, int]] = [(path.parent, data, 1)]
    while pending and len(found) < MAX_HEADERS:
        folder, text, depth = pending.pop(0)
        for name in _included(text):
            header = Path(name) if Path(name).is_absolute() else folder / name
            key = _key(header)
            contents = _read(header) if key not in seen else None
            if contents is None or len(found) >= MAX_HEADERS:
                continue
            seen.add(key)
            found.append((key, contents))
            if depth < MAX_DEPTH:
                pending.append((Path(key).parent, contents, depth + 1))
    return found


# A file's quoted includes by its text: the language server asks on every keystroke that changes the
# host code, and a regular expression over a 60,000-line file took 20 ms.
_INCLUDED: BoundedMemo[tuple[int, int], tuple[str, ...]] = BoundedMemo(64)


def _included(text: bytes | str) -> tuple[str, ...]:
    """The names of the `#include "name"` lines of the text."""

    def scan() -> tuple[str, ...]:
        written = text.decode("utf-8", "replace") if isinstance(text, bytes) else text
        names, at = [], written.find("include")
        while at != -1:
            line = written.rfind("\n", 0, at) + 1
            if written[line:at].replace(" ", "").replace("\t", "") == "#":
                start = len(written) - len(written[at + 7 :].lstrip(" \t"))
                end = written.find('"', start + 1) if written.startswith('"', start) else -1
                if end != -1 and "\n" not in written[start:end]:
                    names.append(written[start + 1 : end])
            at = written.find("include", at + 7)
        return tuple(names)

    return _INCLUDED.get_or_make((len(text), hash(text)), scan)


def _key(path: Path) -> str:
    try:
        return str(path.resolve())
    except OSError:
        return str(path)


def _read(path: Path) -> bytes | None:
    try:
        status = path.stat()
    except OSError:
        return None
    if not path.is_file() or status.st_size > MAX_BYTES:
        return None
    try:
        return _READ.get_or_make((str(path), status.st_mtime_ns, status.st_size), path.read_bytes)
    except OSError:
        return None
