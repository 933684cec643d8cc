"""The GPU check's one results file (JSON): what each stage did, the figures against their targets (decode
>= 0.9x the bare ONNX Runtime CUDA loop; a resident's device bytes within 10% of NVML's reading), the verdict."""

from __future__ import annotations

import json
import xml.etree.ElementTree as ET
from collections.abc import Sequence
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

from tools.gpu_check.stages import TOTAL_S, StageResult

DECODE_TARGET = 0.9
BYTES_TOLERANCE = 0.10
LLAMA_CPP_NOT_AVAILABLE = (
    "not available: llama-cpp-python publishes no CUDA build on PyPI (a source distribution only, whose "
    "CUDA build takes longer than this check may), and its model here, gemma3-270m's GGUF (about 250 MB), "
    "is over what one call to the machine carries"
)


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
