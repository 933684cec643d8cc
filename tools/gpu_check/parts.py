"""The archive cut into parts that each fit one call to a lent machine; on the machine, the parts found,
checked against the manifest's checksums and unpacked."""

from __future__ import annotations

import hashlib
import json
import shutil
import tarfile
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import IO

from tools.gpu_check.common import ARCHIVE, DEFAULT_DIR, MIB


@dataclass(frozen=True)
class Chunk:
    name: str
    part: int
    bytes: int
    sha256: str


@dataclass(frozen=True)
class Manifest:
    created: str
    sm: int
    onnxruntime_gpu: str
    archive_bytes: int
    chunks: tuple[Chunk, ...]
    contents: dict[str, int]  # bytes unpacked: site, nrt-home, pytest-cache

    @staticmethod
    def read(path: Path) -> Manifest:
        raw = json.loads(path.read_text())
        return Manifest(
            raw["created"],
            raw["sm"],
            raw["onnxruntime_gpu"],
            raw["archive_bytes"],
            tuple(Chunk(**c) for c in raw["chunks"]),
            raw["contents"],
        )


def part_sizes(total: int, budget: int) -> list[int]:
    """The archive's ``total`` bytes cut into parts of at most ``budget`` bytes each."""
    if budget <= 0:
        raise ValueError(f"no room to carry anything: the budget is {budget} bytes")
    sizes = [budget] * (total // budget)
    if total % budget or not sizes:
        sizes.append(total % budget)
    return sizes


def carry_plan(parts: int, directory: str = DEFAULT_DIR, results: str = "$OUT/gpu-check.json") -> list[str]:
    """The calls to a lent machine that carry ``parts`` parts, one each, the last running the check."""
    steps = []
    for n in range(1, parts + 1):
        command = (
            f"scripts/gpu-check receive --dir {directory}"
            if n < parts
            else f"PYTHONUNBUFFERED=1 scripts/gpu-check run --dir {directory} --results {results}"
        )
        steps.append(f"call {n} of {parts}: carry [{directory}/part-{n}], command: {command}")
    return steps


def sha256(path: Path) -> str:
    digest = hashlib.sha256()
    with path.open("rb") as f:
        while block := f.read(MIB):
            digest.update(block)
    return digest.hexdigest()


def split_archive(archive: Path, out: Path, budget: int) -> list[Chunk]:
    """``archive`` cut into ``out/part-N/ARCHIVE.NNN`` files of at most ``budget`` bytes."""
    chunks = []
    with archive.open("rb") as source:
        for i, size in enumerate(part_sizes(archive.stat().st_size, budget)):
            part = out / f"part-{i + 1}"
            part.mkdir(parents=True, exist_ok=True)
            target = part / f"{ARCHIVE}.{i:03d}"
            with target.open("wb") as sink:
                left = size
                while left:
                    block = source.read(min(MIB, left))
                    sink.write(block)
                    left -= len(block)
            chunks.append(Chunk(target.name, i + 1, size, sha256(target)))
    return chunks


def find_chunks(manifest: Manifest, places: Sequence[Path]) -> tuple[list[Path], list[str]]:
    """Each chunk's file, from the first place that holds it whole; what is missing, said plainly."""
    found: list[Path] = []
    missing: list[str] = []
    for chunk in manifest.chunks:
        candidates = [p for place in places for p in (place / f"part-{chunk.part}" / chunk.name, place / chunk.name)]
        match = next((p for p in candidates if p.is_file() and p.stat().st_size == chunk.bytes), None)
        if match is None:
            missing.append(
                f"part {chunk.part} of {len(manifest.chunks)} ({chunk.name}) is not here: carry "
                f"{DEFAULT_DIR}/part-{chunk.part} with `scripts/gpu-check receive` in a call just before this one, "
                "on the same warm machine (it is given back 30 s after a call)"
            )
        else:
            found.append(match)
    return found, missing


class _Concatenated:
    """The chunks read one after another, checksummed as they are read (a file object for tarfile)."""

    def __init__(self, paths: Sequence[Path], chunks: Sequence[Chunk]) -> None:
        self._todo = list(zip(paths, chunks, strict=True))
        self._current: IO[bytes] | None = None
        self._digest = hashlib.sha256()
        self._chunk: Chunk | None = None

    def read(self, size: int = -1) -> bytes:
        while True:
            if self._current is None:
                if not self._todo:
                    return b""
                path, self._chunk = self._todo.pop(0)
                self._current = path.open("rb")
                self._digest = hashlib.sha256()
            block = self._current.read(size if size > 0 else MIB)
            if block:
                self._digest.update(block)
                return block
            self._current.close()
            self._current = None
            assert self._chunk is not None
            if self._digest.hexdigest() != self._chunk.sha256:
                raise ValueError(f"{self._chunk.name}: checksum differs from the manifest's (a broken carry)")


def unpack(manifest: Manifest, paths: Sequence[Path], into: Path) -> None:
    """The chunks, checked and concatenated, extracted into ``into`` (replaced whole)."""
    partial = into.with_name(into.name + ".partial")
    shutil.rmtree(partial, ignore_errors=True)
    partial.mkdir(parents=True)
    with tarfile.open(fileobj=_Concatenated(paths, manifest.chunks), mode="r|xz") as archive:  # type: ignore[call-overload]
        archive.extractall(partial, filter="tar")
    shutil.rmtree(into, ignore_errors=True)
    partial.replace(into)
