"""Reading a cubin (a 64-bit little-endian ELF file): its kernels, relocations and resource usage.

Small enough to read with `struct`; no ELF library is a dependency.
"""

from __future__ import annotations

import struct
from dataclasses import dataclass

from cuda_agent.sandbox.plan import ResourceUsage

_SHT_SYMTAB = 2
_SHT_RELA = 4
_SHT_REL = 9
_STT_FUNC = 2
_STO_CUDA_ENTRY = 0x10  # NVIDIA's st_other flag for a __global__ entry point


@dataclass(frozen=True)
class _Section:
    name: str
    kind: int
    offset: int
    size: int
    link: int
    info: int


@dataclass(frozen=True)
class _Symbol:
    name: str
    kind: int
    other: int
    section: int
    value: int


def _sections(elf: bytes) -> list[_Section]:
    if elf[:4] != b"\x7fELF" or elf[4] != 2 or elf[5] != 1:  # 64-bit little-endian, as cubins are
        raise ValueError("not a 64-bit little-endian ELF file")
    (table,) = struct.unpack_from("<Q", elf, 0x28)
    entry_size, count, names_index = struct.unpack_from("<HHH", elf, 0x3A)
    headers = [struct.unpack_from("<IIQQQQII", elf, table + i * entry_size) for i in range(count)]
    names = headers[names_index][4]
    return [
        _Section(_string(elf, names + name), kind, offset, size, link, info)
        for name, kind, _flags, _address, offset, size, link, info in headers
    ]


def _string(elf: bytes, offset: int) -> str:
    return elf[offset : elf.index(b"\0", offset)].decode(errors="replace")


def _symbols(elf: bytes, sections: list[_Section]) -> list[_Symbol]:
    table = next((s for s in sections if s.kind == _SHT_SYMTAB), None)
    if table is None:
        return []
    strings = sections[table.link].offset
    symbols = []
    for offset in range(table.offset, table.offset + table.size, 24):
        name, info, other, section, value, _size = struct.unpack_from("<IBBHQQ", elf, offset)
        symbols.append(_Symbol(_string(elf, strings + name), info & 0xF, other, section, value))
    return symbols


def cubin_entry_names(cubin: bytes) -> set[str]:
    """The __global__ kernels in a cubin, by symbol (what cuModuleGetFunction takes)."""
    try:
        symbols = _symbols(cubin, _sections(cubin))
    except (ValueError, struct.error, IndexError):
        return set()
    return {s.name for s in symbols if s.kind == _STT_FUNC and s.other & _STO_CUDA_ENTRY}


def relocation_target(cubin: bytes, symbol: str) -> str | None:
    """The symbol that the data object `symbol` is relocated to point at, if any."""
    try:
        sections = _sections(cubin)
        symbols = _symbols(cubin, sections)
    except (ValueError, struct.error, IndexError):
        return None
    holder = next((s for s in symbols if s.name == symbol), None)
    if holder is None:
        return None
    for section in sections:
        if section.kind not in (_SHT_REL, _SHT_RELA) or section.info != holder.section:
            continue
        entry_size = 24 if section.kind == _SHT_RELA else 16
        for offset in range(section.offset, section.offset + section.size, entry_size):
            where, info = struct.unpack_from("<QQ", cubin, offset)
            if where == holder.value and (info >> 32) < len(symbols):
                return symbols[info >> 32].name
    return None


# .nv.info attributes (format 0x04: a u16 size, then the payload: symbol index u32, value u32).
_EIFMT_SVAL = 0x04
_EIATTR_FRAME_SIZE = 0x11
_EIATTR_REGCOUNT = 0x2F


def resource_usage(cubin: bytes, symbol: str) -> ResourceUsage:
    """Registers and stack frame of kernel `symbol`, from the cubin's .nv.info records. Used when the
    compiler printed no ptxas report (NVRTC 13.0 returns an empty log after its first program in a
    process). Spills and static shared memory are not recorded there: they stay None."""
    try:
        sections = _sections(cubin)
        symbols = _symbols(cubin, sections)
    except (ValueError, struct.error, IndexError):
        return ResourceUsage()
    index = next((i for i, s in enumerate(symbols) if s.name == symbol), None)
    info = next((s for s in sections if s.name == ".nv.info"), None)
    if index is None or info is None:
        return ResourceUsage()
    found: dict[int, int] = {}
    offset, end = info.offset, info.offset + info.size
    while offset + 4 <= end:
        form, attribute = cubin[offset], cubin[offset + 1]
        if form != _EIFMT_SVAL:
            offset += 4
            continue
        (size,) = struct.unpack_from("<H", cubin, offset + 2)
        if size == 8 and attribute in (_EIATTR_REGCOUNT, _EIATTR_FRAME_SIZE):
            owner, value = struct.unpack_from("<II", cubin, offset + 4)
            if owner == index:
                found[attribute] = value
        offset += 4 + size
    return ResourceUsage(registers=found.get(_EIATTR_REGCOUNT), stack_bytes=found.get(_EIATTR_FRAME_SIZE))
