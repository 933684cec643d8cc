from __future__ import annotations

from datetime import UTC, datetime
from pathlib import Path

import msgspec
import pytest

from nrt.adapters.catalogue import RECORD_FILE, ArtifactRecord, RecordError, load_record, save_record, verify
from nrt.adapters.catalogue.record import decode_record, encode_record, with_files


def _causal(**overrides: object) -> ArtifactRecord:
    fields: dict[str, object] = {
        "name": "demo",
        "kind": "causal-lm",
        "source": "generated:test",
        "recipe": "demo/1",
        "created_at": datetime(2025, 1, 2, 3, 4, 5, tzinfo=UTC),
        "context_length": 128,
        "tokenizer_adds_special_tokens": True,
        "onnx_inputs": ("input_ids", "attention_mask", "past_key_values.0.key", "past_key_values.0.value"),
        "onnx_outputs": ("logits", "present.0.key", "present.0.value"),
        "num_layers": 1,
        "num_kv_heads": 2,
        "head_dim": 8,
        "vocab_size": 100,
        "bos_token_id": 1,
        "eos_token_ids": (2, 3),
        "pad_token_id": 0,
        "quantization": "fp32",
        "past_inputs": ("past_key_values.0.key", "past_key_values.0.value"),
        "present_outputs": ("present.0.key", "present.0.value"),
        "kv_dtype": "float32",
        "logits_output": "logits",
    }
    fields.update(overrides)
    return ArtifactRecord(**fields)  # type: ignore[arg-type]


def _artifact(directory: Path) -> ArtifactRecord:
    directory.mkdir(parents=True, exist_ok=True)
    (directory / "model.onnx").write_bytes(b"\x08\x07" * 500)
    (directory / "tokenizer.json").write_text('{"version": "1.0"}')
    (directory / "config.json").write_text('{"model_type": "llama"}')
    return with_files(_causal(), directory)


def test_round_trip_through_the_record_file(tmp_path: Path) -> None:
    record = _artifact(tmp_path)
    save_record(tmp_path, record)
    assert load_record(tmp_path) == record
    assert not list(tmp_path.glob(".*.tmp")), "the atomic write left its temporary file behind"
    assert decode_record(encode_record(record)) == record


def test_records_from_before_variants_read_as_the_cpu_variant(tmp_path: Path) -> None:
    record = _artifact(tmp_path)
    raw = msgspec.json.decode(encode_record(record))
    assert raw.pop("provider") == "cpu"
    old = decode_record(msgspec.json.encode(raw))
    assert old.provider == "cpu"
    assert old == record
    assert decode_record(encode_record(msgspec.structs.replace(record, provider="cuda"))).provider == "cuda"


def test_record_json_has_flat_runtime_fields(tmp_path: Path) -> None:
    record = _artifact(tmp_path)
    raw = msgspec.json.decode(encode_record(record))
    assert raw["format_version"] == 1
    assert raw["kind"] == "causal-lm"
    assert raw["eos_token_ids"] == [2, 3]
    assert raw["files"][0] == {"path": "model.onnx", "sha256": record.files[0].sha256, "bytes": 1000}
    assert raw["total_bytes"] == sum(entry["bytes"] for entry in raw["files"])


def test_files_are_described_with_sha256_and_size(tmp_path: Path) -> None:
    record = _artifact(tmp_path)
    assert [entry.path for entry in record.files] == ["model.onnx", "tokenizer.json", "config.json"]
    assert record.files[0].bytes == 1000
    assert len(record.files[0].sha256) == 64
    assert verify(tmp_path, record).ok


def test_checksum_verify_catches_a_modified_file(tmp_path: Path) -> None:
    record = _artifact(tmp_path)
    data = bytearray((tmp_path / "model.onnx").read_bytes())
    data[10] ^= 0xFF  # same size, different content
    (tmp_path / "model.onnx").write_bytes(bytes(data))
    assert verify(tmp_path, record, checksums=False).ok, "a size-only check cannot see this"
    result = verify(tmp_path, record)
    assert not result.ok
    assert result.checksums
    assert result.problems == ("model.onnx does not match its sha256 (modified or corrupt)",)


def test_verify_catches_missing_and_resized_files(tmp_path: Path) -> None:
    record = _artifact(tmp_path)
    (tmp_path / "config.json").unlink()
    (tmp_path / "tokenizer.json").write_text('{"version": "1.0", "x": 1}')
    problems = verify(tmp_path, record, checksums=False).problems
    assert "config.json is missing" in problems
    assert any(problem.startswith("tokenizer.json has") for problem in problems)


def test_verify_requires_model_and_tokenizer_to_be_listed(tmp_path: Path) -> None:
    _artifact(tmp_path)
    record = with_files(_causal(), tmp_path, names=("config.json",))
    assert "the record does not list model.onnx" in verify(tmp_path, record).problems


def test_causal_record_must_be_complete() -> None:
    with pytest.raises(ValueError, match="needs num_layers"):
        _causal(num_layers=None)
    with pytest.raises(ValueError, match="a key and a value per layer"):
        _causal(past_inputs=("past_key_values.0.key",))
    with pytest.raises(ValueError, match="eos_token_ids"):
        _causal(eos_token_ids=())


def test_encoder_record_needs_pooling_fields() -> None:
    with pytest.raises(ValueError, match="needs hidden_size, pooling, normalize"):
        ArtifactRecord(
            name="e", kind="encoder", source="s", recipe="e/1", context_length=8, tokenizer_adds_special_tokens=True
        )
    record = ArtifactRecord(
        name="e",
        kind="encoder",
        source="s",
        recipe="e/1",
        context_length=8,
        tokenizer_adds_special_tokens=True,
        hidden_size=4,
        pooling="mean",
        normalize=True,
        hidden_state_output="last_hidden_state",
    )
    assert decode_record(encode_record(record)) == record


def test_invalid_or_unsupported_records_are_errors(tmp_path: Path) -> None:
    with pytest.raises(RecordError, match="does not exist"):
        load_record(tmp_path)
    (tmp_path / RECORD_FILE).write_text("{not json")
    with pytest.raises(RecordError, match="not an artifact record"):
        load_record(tmp_path)
    (tmp_path / RECORD_FILE).write_text('{"format_version": 99}')
    with pytest.raises(RecordError, match="format_version 99 is not supported"):
        load_record(tmp_path)
    (tmp_path / RECORD_FILE).write_text('{"format_version": 1, "name": "x", "kind": "causal-lm"}')
    with pytest.raises(RecordError, match="invalid artifact record"):
        load_record(tmp_path)
    bad_total = encode_record(_causal()).replace(b'"total_bytes": 0', b'"total_bytes": 5')
    with pytest.raises(RecordError, match="total_bytes"):
        decode_record(bad_total)
