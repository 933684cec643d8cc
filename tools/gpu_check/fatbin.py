"""The CUDA provider kept to one GPU architecture: the other architectures' code zeroed in place in its
``.nv_fatbin`` section (compression then drops the zeros)."""

from __future__ import annotations

import struct
from collections.abc import Iterator
from dataclasses import dataclass

FATBIN_MAGIC = 0xBA55ED50
FATBIN_ELF = 2


@dataclass(frozen=True)
class PruneReport:
    containers: int = 0
    kept: int = 0  # entries for the architecture kept
    zeroed: int = 0  # entries of other architectures in containers that hold one for it
    bytes_zeroed: int = 0
    untouched: int = 0  # containers with no entry for it (left whole)


def elf_section(data: bytes | bytearray, name: str) -> tuple[int, int] | None:
    """(file offset, size) of the ELF64 little-endian section ``name``; None when there is none."""
    if data[:4] != b"\x7fELF" or data[4] != 2 or data[5] != 1:
        raise ValueError("not a little-endian ELF64 file")
    shoff = struct.unpack_from("<Q", data, 0x28)[0]
    shentsize, shnum, shstrndx = struct.unpack_from("<HHH", data, 0x3A)
    strtab = shoff + shstrndx * shentsize
    names_at = struct.unpack_from("<Q", data, strtab + 0x18)[0]
    for i in range(shnum):
        header = shoff + i * shentsize
        name_offset = struct.unpack_from("<I", data, header)[0]
        start = names_at + name_offset
        section = bytes(data[start : data.index(b"\0", start)]).decode()
        if section == name:
            offset, size = struct.unpack_from("<QQ", data, header + 0x18)
            return int(offset), int(size)
    return None


def fatbin_entries(data: bytes | bytearray, start: int, end: int) -> Iterator[list[tuple[int, int, int, int]]]:
    """Each fat binary container between ``start`` and ``end``: its entries (kind, sm, payload offset, size)."""
    pos = start
    while pos + 16 <= end:
        magic, _version, header_size, fat_size = struct.unpack_from("<IHHQ", data, pos)
        if magic != FATBIN_MAGIC:
            pos += 8  # containers are 8-byte aligned, padding between them
            continue
        entry, container_end = pos + header_size, pos + header_size + fat_size
        entries = []
        while entry < container_end:
            kind, _v, entry_header, padded = struct.unpack_from("<HHIQ", data, entry)
            sm = struct.unpack_from("<I", data, entry + 28)[0]
            entries.append((kind, sm, entry + entry_header, padded))
            entry += entry_header + padded
        yield entries
        pos = container_end


def prune_fatbin(data: bytearray, keep_sm: int) -> PruneReport:
    """Zero, in place, the GPU code for every architecture but ``keep_sm`` in each container of the
    ``.nv_fatbin`` section that holds code for ``keep_sm`` (the entries' headers stay: the CUDA driver
    still reads them and loads the one for its device). The file keeps its size and layout; the zeros
    cost nothing compressed. A container with no entry for ``keep_sm`` is left whole."""
    section = elf_section(data, ".nv_fatbin")
    if section is None:
        raise ValueError("no .nv_fatbin section: not a CUDA library")
    offset, size = section
    containers = kept = zeroed = bytes_zeroed = untouched = 0
    for entries in fatbin_entries(data, offset, offset + size):
        containers += 1
        if not any(kind == FATBIN_ELF and sm == keep_sm for kind, sm, _, _ in entries):
            untouched += 1
            continue
        for kind, sm, payload, length in entries:
            if kind == FATBIN_ELF and sm == keep_sm:
                kept += 1
            else:
                data[payload : payload + length] = bytes(length)
                zeroed += 1
                bytes_zeroed += length
    return PruneReport(containers, kept, zeroed, bytes_zeroed, untouched)
