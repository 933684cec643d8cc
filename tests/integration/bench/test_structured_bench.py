"""bench.structured on tiny-llama, end to end and cheaply: every figure it promises is printed, as a
ratio against the free requests measured in the same run. Nothing about speed is asserted."""

from __future__ import annotations

import json
from pathlib import Path

import jsonschema
import pytest
from bench import structured


def test_the_large_schema_is_one_the_engine_takes() -> None:
    schema = structured.large_schema()
    jsonschema.Draft202012Validator.check_schema(schema)
    assert len(schema["properties"]) == 80
    assert json.loads(structured.json_format(schema).schema or "") == schema


async def test_bench_structured_prints_its_ratios(
    nrt_home: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    monkeypatch.setattr(structured, "ROUNDS", 1)
    await structured.main("tiny-llama", 8)
    out = capsys.readouterr().out
    for batch in structured.BATCHES:
        assert f"decode, batch {batch}, free" in out
        assert f"decode, batch {batch}, json schema" in out
    assert out.count("vs free (target >= 0.9)") == len(structured.BATCHES)
    assert "time to first token, large schema, first" in out
    assert "time to first token, large schema, cached" in out
