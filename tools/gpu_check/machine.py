"""On the lent machine: ``receive`` keeps each call's part for the last call, and ``run`` assembles the
parts, runs the stages with their timeouts and writes the results file."""

from __future__ import annotations

import json
import shlex
import shutil
import subprocess
import sys
import tarfile
import time
from dataclasses import asdict
from pathlib import Path
from typing import Any

from tools.gpu_check.common import ARCHIVE, MANIFEST, MIB, ROOT, STAGING, say
from tools.gpu_check.device import Gpu, find_gpu, sm_of
from tools.gpu_check.parts import Manifest, find_chunks, unpack
from tools.gpu_check.results import (
    LLAMA_CPP_NOT_AVAILABLE,
    Results,
    bench_checks,
    bytes_check,
    junit_summary,
    summary_lines,
    verdict,
    write_results,
)
from tools.gpu_check.stage_plan import plan, stage_env
from tools.gpu_check.stages import TOTAL_S, Deadline, StageResult, run_stage


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
