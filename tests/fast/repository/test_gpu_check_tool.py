"""The GPU check's pure pieces (tools/gpu_check/): its targets, the results file, the stages' timeouts,
the CUDA provider kept to one architecture, the parts that each fit one call; and ``run`` on a machine
without a GPU, which says that it needs one."""

from __future__ import annotations

import json
import struct
import subprocess
import tarfile
from pathlib import Path

import pytest
from tools import gpu_check
from tools.gpu_check import (
    Deadline,
    Results,
    StageResult,
    bench_checks,
    bytes_check,
    carry_plan,
    decode_check,
    device,
    find_chunks,
    junit_summary,
    machine,
    part_sizes,
    prune_fatbin,
    run_stage,
    split_archive,
    summary_lines,
    ttft_check,
    unpack,
    verdict,
    write_results,
)

# -- targets ---------------------------------------------------------------------------------------


def test_decode_is_held_to_nine_tenths_of_the_bare_loop() -> None:
    assert decode_check(95.0, 100.0).met is True
    assert decode_check(90.0, 100.0).met is True
    missed = decode_check(89.0, 100.0)
    assert (missed.met, missed.ratio, missed.target) == (False, 0.89, ">= 0.9")
    assert decode_check(None, 100.0).met is None
    assert decode_check(90.0, 0.0).met is None


def test_resident_bytes_are_held_within_a_tenth_of_nvml() -> None:
    assert bytes_check(105, 100, "per process").met is True
    assert bytes_check(91, 100, "per process").met is True
    assert bytes_check(111, 100, "per process").met is False
    assert bytes_check(89, 100, "per process").met is False
    unmeasured = bytes_check(None, None, "")
    assert (unmeasured.met, unmeasured.note) == (None, "not measured")


def test_time_to_first_token_is_a_speed_with_no_target() -> None:
    check = ttft_check(2.0, 1.0)
    assert (check.ratio, check.target, check.met) == (0.5, "", None)


def test_the_benchmarks_figures_give_the_checks() -> None:
    figures = [
        {"name": "bare ONNX Runtime loop (cuda): time to first token", "value": 1.0},
        {"name": "worker over NATS: time to first token", "value": 2.0},
        {"name": "bare ONNX Runtime loop (cuda): decode", "value": 400.0},
        {"name": "worker over NATS: decode", "value": 380.0},
    ]
    decode, ttft = bench_checks(figures)
    assert (decode.value, decode.reference, decode.ratio, decode.met) == (380.0, 400.0, 0.95, True)
    assert (ttft.value, ttft.reference, ttft.ratio) == (2.0, 1.0, 0.5)
    assert bench_checks([])[0].met is None


# -- the results file --------------------------------------------------------------------------------


def results(**changes: object) -> Results:
    base = Results(started="2026-11-27T00:00:00Z", commit="abc1234")
    base.stages = [StageResult("gpu tests", "passed", 12.0)]
    base.checks = [decode_check(95.0, 100.0), bytes_check(100, 101, "per process"), ttft_check(2.0, 1.0)]
    base.gpu_tests = gpu_check.TestSummary(passed=7)
    for key, value in changes.items():
        setattr(base, key, value)
    return base


def test_a_run_passes_only_with_every_stage_passed_and_every_target_met() -> None:
    assert verdict(results()) == ("passed", [])
    status, missed = verdict(results(stages=[StageResult("benchmark", "timed out", 120.0, "stopped after 120 s")]))
    assert status == "failed"
    assert missed == ["stage benchmark: timed out (stopped after 120 s)"]
    status, missed = verdict(results(checks=[decode_check(50.0, 100.0)]))
    assert missed == ["decode: worker vs bare ORT CUDA loop (tokens/s): 0.5 (target >= 0.9)"]
    status, missed = verdict(results(checks=[bytes_check(None, None, "no figures")]))
    assert status == "failed"
    assert "not measured (no figures)" in missed[0]
    status, missed = verdict(results(gpu_tests=gpu_check.TestSummary(passed=6, failed=1)))
    assert missed == ["gpu tests: 1 failed, 0 errors"]


def test_the_results_file_is_one_json_document_with_its_verdict(tmp_path: Path) -> None:
    path = tmp_path / "out" / "gpu-check.json"
    written = results(device={"name": "NVIDIA H100 80GB HBM3"}, versions={"onnxruntime": "1.31.1"})
    write_results(path, written)
    data = json.loads(path.read_text())
    assert data["verdict"] == "passed"
    assert data["device"]["name"] == "NVIDIA H100 80GB HBM3"
    assert data["gpu_tests"]["passed"] == 7
    assert next(c["name"] for c in data["checks"]).startswith("decode")
    assert data["llama_cpp_cuda"].startswith("not available")
    assert not list(tmp_path.glob("out/*.partial"))
    lines = summary_lines(written)
    assert lines[0].startswith("GPU check: passed")
    assert any("ratio 0.95 (target >= 0.9) met" in line for line in lines)


def test_the_gpu_tests_are_summed_from_junit_xml(tmp_path: Path) -> None:
    xml = tmp_path / "junit.xml"
    xml.write_text(
        """<?xml version="1.0"?><testsuites><testsuite name="pytest">
        <testcase classname="tests.a" name="test_ok"/>
        <testcase classname="tests.a" name="test_bad"><failure message="boom"/></testcase>
        <testcase classname="tests.b" name="test_err"><error message="fixture"/></testcase>
        <testcase classname="tests.b" name="test_skip"><skipped message="no CUDA device"/></testcase>
        </testsuite></testsuites>"""
    )
    summary = junit_summary(xml)
    assert (summary.passed, summary.failed, summary.errors, summary.skipped) == (1, 1, 1, 1)
    assert summary.failing == ("tests.a::test_bad", "tests.b::test_err")
    assert summary.skip_reasons == ("tests.b::test_skip: no CUDA device",)


# -- stages with timeouts ----------------------------------------------------------------------------


class Clock:
    def __init__(self) -> None:
        self.now = 0.0

    def __call__(self) -> float:
        return self.now


class FakeProcess:
    def __init__(self, returncode: int, output: str = "", hangs: bool = False) -> None:
        self.pid = 4242
        self.returncode: int | None = returncode
        self.output = output
        self.hangs = hangs
        self.timeouts: list[float | None] = []

    def communicate(self, timeout: float | None = None) -> tuple[str, str]:
        self.timeouts.append(timeout)
        if self.hangs and timeout is not None:
            raise subprocess.TimeoutExpired("x", timeout)
        return self.output, ""


def test_a_stage_passes_or_fails_by_its_exit_status_with_its_output() -> None:
    deadline = Deadline(470, Clock())
    ok = FakeProcess(0, "3 passed")
    result = run_stage("gpu tests", ["pytest"], 60, deadline, popen=lambda *a, **k: ok)
    assert (result.status, result.output_tail, ok.timeouts) == ("passed", "3 passed", [60])
    bad = FakeProcess(1, "1 failed")
    result = run_stage("gpu tests", ["pytest"], 60, deadline, popen=lambda *a, **k: bad)
    assert (result.status, result.detail) == ("failed", "exit status 1")


def test_a_stage_past_its_timeout_is_stopped_with_its_process_group() -> None:
    killed: list[int] = []
    hung = FakeProcess(-9, "half", hangs=True)
    result = run_stage(
        "benchmark", ["bench"], 120, Deadline(470, Clock()), popen=lambda *a, **k: hung, kill=killed.append
    )
    assert (result.status, result.detail, result.output_tail) == ("timed out", "stopped after 120 s", "half")
    assert killed == [4242]


def test_stages_share_the_runs_deadline_and_are_skipped_past_it() -> None:
    clock = Clock()
    deadline = Deadline(470, clock)
    clock.now = 400.0
    process = FakeProcess(0)
    run_stage("benchmark", ["bench"], 120, deadline, popen=lambda *a, **k: process)
    assert process.timeouts == [60.0]  # 70 s left, less the reserve for writing the results
    clock.now = 450.0
    result = run_stage("late", ["x"], 120, deadline, popen=lambda *a, **k: pytest.fail("started"))
    assert (result.status, result.detail) == ("skipped", "not started: 20 s left of 470 s")


def test_a_stage_that_cannot_start_fails_saying_why() -> None:
    def missing(*args: object, **kwargs: object) -> FakeProcess:
        raise FileNotFoundError("no such file: nvidia-smi")

    result = run_stage("versions", ["nvidia-smi"], 30, Deadline(470, Clock()), popen=missing)
    assert result.status == "failed"
    assert "no such file" in result.detail


# -- the CUDA provider kept to one architecture ---------------------------------------------------------


def entry(sm: int, payload: bytes, kind: int = 2) -> bytes:
    header = bytearray(64)
    struct.pack_into("<HHIQ", header, 0, kind, 0x101, 64, len(payload))
    struct.pack_into("<I", header, 16, len(payload))
    struct.pack_into("<I", header, 28, sm)
    return bytes(header) + payload


def container(*entries: bytes) -> bytes:
    body = b"".join(entries)
    return struct.pack("<IHHQ", gpu_check.FATBIN_MAGIC, 1, 16, len(body)) + body


def elf_with(section: bytes, name: bytes = b".nv_fatbin") -> bytes:
    """A minimal little-endian ELF64 file: a null section, .shstrtab and ``name`` (.nv_fatbin)."""
    names = b"\0.shstrtab\0" + name + b"\0"
    names_at, section_at = 64, 64 + len(names)
    headers_at = section_at + len(section) + (-(section_at + len(section)) % 8)
    ident = b"\x7fELF" + bytes([2, 1, 1]) + bytes(9)
    header = bytearray(64)
    header[:16] = ident
    struct.pack_into("<Q", header, 0x28, headers_at)
    struct.pack_into("<HHH", header, 0x3A, 64, 3, 1)
    body = bytes(header) + names + section + bytes(headers_at - section_at - len(section))

    def section_header(name: int, offset: int, size: int) -> bytes:
        raw = bytearray(64)
        struct.pack_into("<I", raw, 0, name)
        struct.pack_into("<QQ", raw, 0x18, offset, size)
        return bytes(raw)

    return (
        body
        + bytes(64)
        + section_header(names.index(b".shstrtab"), names_at, len(names))
        + section_header(names.index(name), section_at, len(section))
    )


def test_the_cuda_provider_keeps_the_code_for_one_architecture() -> None:
    fatbin = (
        container(entry(80, b"A" * 16), entry(90, b"B" * 24), entry(120, b"C" * 8))
        + bytes(8)  # padding between containers
        + container(entry(120, b"D" * 8))  # nothing for sm_90: left whole
        + container(entry(90, b"U" * 8))
    )
    data = bytearray(elf_with(fatbin))
    size = len(data)
    report = prune_fatbin(data, 90)
    assert (report.containers, report.kept, report.zeroed, report.bytes_zeroed, report.untouched) == (3, 2, 2, 24, 1)
    assert len(data) == size
    assert b"A" * 16 not in data
    assert b"C" * 8 not in data
    assert b"B" * 24 in data
    assert b"D" * 8 in data
    assert b"U" * 8 in data
    assert gpu_check.elf_section(data, ".nv_fatbin") is not None
    assert gpu_check.elf_section(data, ".text") is None


def test_a_library_without_gpu_code_is_refused() -> None:
    with pytest.raises(ValueError, match=r"no \.nv_fatbin section"):
        prune_fatbin(bytearray(elf_with(bytes(16), name=b".rodata")), 90)
    with pytest.raises(ValueError, match="not a little-endian ELF64"):
        gpu_check.elf_section(b"#!/bin/sh\n" + bytes(64), ".nv_fatbin")


# -- parts that each fit one call ----------------------------------------------------------------------


def test_the_archive_is_cut_into_parts_under_the_budget() -> None:
    assert part_sizes(10, 4) == [4, 4, 2]
    assert part_sizes(8, 4) == [4, 4]
    assert part_sizes(3, 4) == [3]
    with pytest.raises(ValueError, match="no room"):
        part_sizes(3, -1)


def test_the_carry_plan_receives_every_part_but_the_last_which_runs() -> None:
    steps = carry_plan(2)
    assert steps[0] == "call 1 of 2: carry [.gpu-check/part-1], command: scripts/gpu-check receive --dir .gpu-check"
    assert steps[1].startswith(
        "call 2 of 2: carry [.gpu-check/part-2], command: PYTHONUNBUFFERED=1 scripts/gpu-check run"
    )
    assert "--results $OUT/gpu-check.json" in steps[1]


def archive_of(tmp_path: Path) -> Path:
    source = tmp_path / "tree"
    (source / "site" / "onnxruntime").mkdir(parents=True)
    (source / "site" / "onnxruntime" / "__init__.py").write_bytes(bytes(range(256)) * 40)
    (source / "nrt-home").mkdir()
    (source / "nrt-home" / "record.json").write_text("{}")
    archive = tmp_path / gpu_check.ARCHIVE
    with tarfile.open(archive, "w:xz") as tar:
        for name in ("site", "nrt-home"):
            tar.add(source / name, arcname=name)
    return archive


def manifest_for(chunks: list[gpu_check.Chunk]) -> gpu_check.Manifest:
    return gpu_check.Manifest("2026-11-27T00:00:00Z", 90, "1.31.1", sum(c.bytes for c in chunks), tuple(chunks), {})


def test_parts_carried_in_separate_calls_are_found_checked_and_unpacked(tmp_path: Path) -> None:
    archive = archive_of(tmp_path)
    out = tmp_path / ".gpu-check"
    chunks = split_archive(archive, out, 300)
    assert len(chunks) > 1
    assert all(c.bytes <= 300 for c in chunks)
    manifest = manifest_for(chunks)
    received = tmp_path / "staging"  # what `receive` kept from the earlier calls
    received.mkdir()
    for chunk in chunks[:-1]:
        (out / f"part-{chunk.part}" / chunk.name).rename(received / chunk.name)
    paths, missing = find_chunks(manifest, [out, received])
    assert missing == []
    unpack(manifest, paths, tmp_path / "unpacked")
    assert (tmp_path / "unpacked" / "site" / "onnxruntime" / "__init__.py").read_bytes() == bytes(range(256)) * 40
    assert (tmp_path / "unpacked" / "nrt-home" / "record.json").read_text() == "{}"


def test_a_part_not_received_is_named_with_what_to_do(tmp_path: Path) -> None:
    chunks = split_archive(archive_of(tmp_path), tmp_path / "out", 300)
    (tmp_path / "out" / "part-1" / chunks[0].name).unlink()
    _, missing = find_chunks(manifest_for(chunks), [tmp_path / "out"])
    assert len(missing) == 1
    assert missing[0].startswith(f"part 1 of {len(chunks)} ({chunks[0].name}) is not here: carry .gpu-check/part-1")
    assert "same warm machine" in missing[0]


def test_a_broken_part_is_refused_by_its_checksum(tmp_path: Path) -> None:
    chunks = split_archive(archive_of(tmp_path), tmp_path / "out", 300)
    broken = tmp_path / "out" / "part-1" / chunks[0].name
    data = bytearray(broken.read_bytes())
    data[-1] ^= 0xFF
    broken.write_bytes(bytes(data))
    paths, _ = find_chunks(manifest_for(chunks), [tmp_path / "out"])
    with pytest.raises((ValueError, tarfile.TarError, EOFError)):
        unpack(manifest_for(chunks), paths, tmp_path / "unpacked")
    assert not (tmp_path / "unpacked").exists()


# -- without a GPU ---------------------------------------------------------------------------------------


@pytest.fixture
def no_gpu(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    monkeypatch.setattr(device.shutil, "which", lambda name: None)
    monkeypatch.setattr(machine, "commit", lambda: "abc1234")
    monkeypatch.setattr(machine, "STAGING", tmp_path / "staging")


def test_a_dry_run_says_that_the_check_needs_a_gpu(no_gpu: None, capsys: pytest.CaptureFixture[str]) -> None:
    assert gpu_check.main(["run", "--dry-run", "--dir", "/nonexistent"]) == 0
    out = capsys.readouterr().out
    assert "needs an NVIDIA GPU (CUDA): none here" in out
    assert "parts: none under /nonexistent" in out
    assert "gpu tests (210 s)" in out
    assert "-m gpu" in out
    assert "bench.worker --model tiny-llama" in out


def test_run_without_a_gpu_stops_at_once_and_says_so_in_its_file(no_gpu: None, tmp_path: Path) -> None:
    path = tmp_path / "gpu-check.json"
    assert gpu_check.main(["run", "--results", str(path), "--dir", str(tmp_path)]) == 2
    data = json.loads(path.read_text())
    assert data["verdict"] == "failed"
    assert data["stages"][0]["name"] == "device"
    assert "needs an NVIDIA GPU" in data["stages"][0]["detail"]


def test_the_benchmarks_figures_are_kept_for_its_results_file(capsys: pytest.CaptureFixture[str]) -> None:
    from bench import common

    before = len(common.FIGURES)
    common.report("worker over NATS: decode", 380.0, "tokens/s", 0.95, "bare ORT CUDA loop", ">= 0.9", met=True)
    assert common.FIGURES[before:] == [
        {
            "name": "worker over NATS: decode",
            "value": 380.0,
            "unit": "tokens/s",
            "ratio": 0.95,
            "floor": "bare ORT CUDA loop",
            "target": ">= 0.9",
            "met": True,
        }
    ]
    assert "ratio  0.95 vs bare ORT CUDA loop (target >= 0.9) met" in capsys.readouterr().out
    del common.FIGURES[before:]
