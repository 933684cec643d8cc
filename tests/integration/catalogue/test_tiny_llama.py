"""tiny-llama through the real path: build, record, onnxruntime, KV cache."""

from __future__ import annotations

import shutil
import time
from pathlib import Path

import msgspec
import numpy as np
import onnxruntime as ort
import pytest
from tokenizers import Tokenizer

from nrt.adapters.catalogue import (
    CONFIG_FILE,
    MODEL_FILE,
    RECORD_FILE,
    TOKENIZER_FILE,
    ArtifactError,
    BuildContext,
    LocalSource,
    PreparedArtifact,
    StepLog,
    artifact_dir,
    artifacts,
    ensure_artifact,
    find_prepared,
    get_entry,
    load_record,
    prepare,
    prepare_local,
    prepare_steps,
    resolve_source,
    status,
    verify,
)
from nrt.adapters.catalogue.greedy import empty_past, forward, greedy, open_session
from nrt.adapters.catalogue.record import ArtifactRecord


def test_artifact_layout_and_record(tiny_llama: PreparedArtifact) -> None:
    directory = tiny_llama.directory
    assert directory.name == "tiny-llama"
    assert sorted(path.name for path in directory.iterdir()) == sorted(
        [MODEL_FILE, TOKENIZER_FILE, CONFIG_FILE, RECORD_FILE]
    )
    record = load_record(directory)
    assert record == tiny_llama.record
    assert verify(directory, record, checksums=True).ok
    assert record.kind == "causal-lm"
    assert record.recipe == get_entry("tiny-llama").recipe
    assert (record.num_layers, record.num_kv_heads, record.head_dim, record.vocab_size) == (2, 2, 16, 259)
    assert record.past_inputs == (
        "past_key_values.0.key",
        "past_key_values.0.value",
        "past_key_values.1.key",
        "past_key_values.1.value",
    )
    assert record.present_outputs == ("present.0.key", "present.0.value", "present.1.key", "present.1.value")
    assert record.position_ids_input == "position_ids"
    assert (record.bos_token_id, record.eos_token_ids, record.pad_token_id) == (1, (2,), 0)
    assert record.quantization == "fp32"
    assert record.context_length == 512
    assert record.total_bytes == sum(path.stat().st_size for path in directory.iterdir() if path.name != RECORD_FILE)


def test_onnxruntime_loads_it_from_bytes(tiny_llama: PreparedArtifact) -> None:
    """Standby holds the model's bytes: the graph must be one self-contained file."""
    session = ort.InferenceSession(tiny_llama.model_path.read_bytes(), providers=["CPUExecutionProvider"])
    names = [item.name for item in session.get_inputs()]
    assert names == list(tiny_llama.record.onnx_inputs)
    assert [item.name for item in session.get_outputs()] == list(tiny_llama.record.onnx_outputs)


def test_tokenizer_adds_bos_and_round_trips_bytes(tiny_llama: PreparedArtifact) -> None:
    tokenizer = Tokenizer.from_file(str(tiny_llama.tokenizer_path))
    text = "Héllo, wörld! 🩵"
    ids = tokenizer.encode(text).ids
    assert ids[0] == tiny_llama.record.bos_token_id
    assert len(ids) == 1 + len(text.encode())
    assert tokenizer.decode(ids) == text


def test_prefill_then_decode_equals_full_recompute(tiny_llama: PreparedArtifact) -> None:
    record = tiny_llama.record
    session = open_session(tiny_llama.directory, record)
    tokenizer = Tokenizer.from_file(str(tiny_llama.tokenizer_path))
    prompt = tokenizer.encode("The quick brown fox").ids

    logits, past = forward(session, record, np.array([prompt], dtype=np.int64), empty_past(record))
    assert logits.shape == (1, len(prompt), record.vocab_size)
    assert past[record.past_inputs[0]].shape == (1, record.num_kv_heads, len(prompt), record.head_dim)
    next_token = int(np.argmax(logits[0, -1]))
    step_logits, past = forward(session, record, np.array([[next_token]], dtype=np.int64), past)
    assert past[record.past_inputs[-1]].shape[2] == len(prompt) + 1

    full, _ = forward(session, record, np.array([[*prompt, next_token]], dtype=np.int64), empty_past(record))
    np.testing.assert_allclose(step_logits[0, -1], full[0, -1], rtol=1e-4, atol=1e-5)
    np.testing.assert_allclose(logits[0], full[0, :-1], rtol=1e-4, atol=1e-5)


def test_greedy_is_deterministic_and_depends_on_the_prompt(tiny_llama: PreparedArtifact) -> None:
    record = tiny_llama.record
    session = open_session(tiny_llama.directory, record)
    tokenizer = Tokenizer.from_file(str(tiny_llama.tokenizer_path))
    first = greedy(session, record, tokenizer.encode("Hello").ids, 12, stop_at_eos=False)
    again = greedy(session, record, tokenizer.encode("Hello").ids, 12, stop_at_eos=False)
    other = greedy(session, record, tokenizer.encode("Goodbye").ids, 12, stop_at_eos=False)
    assert first.token_ids == again.token_ids
    assert len(first.token_ids) == 12
    assert first.token_ids != other.token_ids


def test_the_build_is_deterministic(tiny_llama: PreparedArtifact, nrt_home: Path) -> None:
    started = time.perf_counter()
    rebuilt = prepare("tiny-llama")
    assert time.perf_counter() - started < 60
    assert rebuilt.directory == nrt_home / "models" / "tiny-llama"
    digests = {entry.path: entry.sha256 for entry in rebuilt.record.files}
    assert digests == {entry.path: entry.sha256 for entry in tiny_llama.record.files}


def test_prepare_is_idempotent(in_tiny_home: PreparedArtifact) -> None:
    log = StepLog()
    again = prepare("tiny-llama", progress=log)
    assert log.steps == [], "a verified artifact must not be rebuilt"
    assert again.record == in_tiny_home.record
    assert find_prepared("tiny-llama") == again
    assert status("tiny-llama", checksums=True).state == "ready"


def test_a_corrupt_artifact_is_rebuilt(nrt_home: Path, tiny_llama: PreparedArtifact) -> None:
    shutil.copytree(tiny_llama.directory, nrt_home / "models" / "tiny-llama")
    model = artifact_dir("tiny-llama") / MODEL_FILE
    data = bytearray(model.read_bytes())
    data[-1] ^= 0x01
    model.write_bytes(bytes(data))
    assert status("tiny-llama").state == "ready", "sizes alone cannot see it"
    assert status("tiny-llama", checksums=True).state == "invalid"
    log = StepLog()
    rebuilt = prepare("tiny-llama", progress=log)
    assert log.steps == list(prepare_steps(get_entry("tiny-llama")))
    assert verify(rebuilt.directory, rebuilt.record).ok


def test_an_artifact_of_an_older_recipe_is_stale(nrt_home: Path, tiny_llama: PreparedArtifact) -> None:
    target = nrt_home / "models" / "tiny-llama"
    shutil.copytree(tiny_llama.directory, target)
    old = msgspec.structs.replace(tiny_llama.record, recipe="tiny-llama/0")
    (target / RECORD_FILE).write_bytes(msgspec.json.encode(old))
    current = status("tiny-llama")
    assert current.state == "stale"
    assert current.problem is not None
    assert "tiny-llama/0" in current.problem


def test_a_failed_build_leaves_nothing_that_looks_valid(nrt_home: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    def broken(context: BuildContext) -> tuple[ArtifactRecord, ...]:
        (context.staging / MODEL_FILE).write_bytes(b"half a model")
        raise ArtifactError("export crashed")

    failing = msgspec.structs.replace(get_entry("tiny-llama"), build=broken)
    monkeypatch.setattr(artifacts, "get_entry", lambda name: failing)
    with pytest.raises(ArtifactError, match="export crashed"):
        prepare("tiny-llama")
    models = nrt_home / "models"
    assert not (models / "tiny-llama").exists()
    assert [path.name for path in models.iterdir()] == [".tiny-llama.lock"]
    assert status("tiny-llama").state == "missing"


def test_a_local_export_directory_gets_a_record(tmp_path: Path, tiny_llama: PreparedArtifact) -> None:
    local = tmp_path / "my-router-onnx"
    local.mkdir()
    for name in (MODEL_FILE, TOKENIZER_FILE, CONFIG_FILE):
        shutil.copy(tiny_llama.directory / name, local / name)
    source = resolve_source("my-router-onnx", base_dir=tmp_path)
    assert isinstance(source, LocalSource)
    artifact = ensure_artifact(source)
    record = artifact.record
    assert artifact.directory == local
    assert (local / RECORD_FILE).is_file()
    assert record.name == "my-router-onnx"
    assert record.source == f"local:{local}"
    assert record.quantization == "fp32"
    for field in ("kind", "num_layers", "num_kv_heads", "head_dim", "vocab_size", "past_inputs", "present_outputs"):
        assert getattr(record, field) == getattr(tiny_llama.record, field), field
    assert record.eos_token_ids == (2,)
    assert record.context_length == 512
    assert record.tokenizer_adds_special_tokens
    assert prepare_local(local) == artifact  # the saved record is reused


def test_local_directories_must_be_usable(tmp_path: Path, tiny_llama: PreparedArtifact) -> None:
    with pytest.raises(ArtifactError, match="does not exist"):
        prepare_local(tmp_path / "nowhere")
    with pytest.raises(ArtifactError, match="did you mean catalogue://tiny-llama"):
        prepare_local(Path("tiny-llama"))
    empty = tmp_path / "empty"
    empty.mkdir()
    with pytest.raises(ArtifactError, match=r"has no model\.onnx"):
        prepare_local(empty)
    split = tmp_path / "split"
    split.mkdir()
    for name in (MODEL_FILE, TOKENIZER_FILE, CONFIG_FILE):
        shutil.copy(tiny_llama.directory / name, split / name)
    (split / "model.onnx_data").write_bytes(b"weights")  # external data (over 2 GB): its bytes count too
    assert "model.onnx_data" in [entry.path for entry in prepare_local(split).record.files]
