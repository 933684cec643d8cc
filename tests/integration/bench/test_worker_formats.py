"""bench.worker on tiny-llama, end to end and cheaply: the worker over NATS against the bare loop, and
the weight formats' path (a tiny Llama checkpoint prepared in int8 and int4 as an operator's model is,
each served by the worker, their perplexities beside fp32's). Nothing about speed is asserted."""

from __future__ import annotations

import argparse
from pathlib import Path

import pytest
from bench import worker
from bench.models import parse_formats


def test_the_formats_are_read_as_a_manifest_names_them() -> None:
    assert parse_formats("int8,int4") == ("int8", "int4")
    assert parse_formats("fp32, int4,none") == ("none", "int4")  # fp32 is quantization: none
    assert parse_formats("") == ()
    with pytest.raises(argparse.ArgumentTypeError, match="unknown weight format 'int2'"):
        parse_formats("int2")


async def test_bench_worker_serves_each_weight_format(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    monkeypatch.setenv("NRT_HOME", str(tmp_path / "nrt-home"))
    monkeypatch.setattr(worker, "ROUNDS", 1)
    monkeypatch.setattr(worker, "AGGREGATE_ROUNDS", 1)
    await worker.main("tiny-llama", 4, spin="never", formats=("int8", "int4"))
    out = capsys.readouterr().out
    assert "worker over NATS: decode" in out
    assert "weight formats (int8, int4): tiny-llama prepared from one checkpoint" in out
    assert "fp32 (not served): perplexity of the fixed text" in out
    for label in ("int8", "int4"):
        for figure in ("bytes", "time to first token", "decode", "perplexity of the fixed text"):
            assert f"worker, {label}: {figure}" in out
