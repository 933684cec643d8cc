"""Tiers as objects, and one shared copy of an artifact for the model ids that use it."""

from __future__ import annotations

from pathlib import Path

import pytest

from nrt.adapters.inference import (
    ArtifactError,
    ArtifactRegistry,
    CausalLM,
    InferenceError,
    active_provider,
    bare_greedy,
    build_session,
    load_weights,
    select_providers,
)


def test_weights_hold_the_model_bytes(tiny_llama_dir: Path) -> None:
    weights = load_weights(tiny_llama_dir)
    assert weights.nbytes == (tiny_llama_dir / "model.onnx").stat().st_size
    session = build_session(weights, ["CPUExecutionProvider"])
    assert active_provider(session) == "CPUExecutionProvider"
    model = CausalLM(session, tiny_llama_dir)
    assert bare_greedy(session, model.encode("Hello"), 5) == bare_greedy(
        CausalLM.load(tiny_llama_dir).session, model.encode("Hello"), 5
    )


def test_provider_selection_puts_cuda_first_when_offered() -> None:
    assert select_providers(["CUDAExecutionProvider", "CPUExecutionProvider"]) == [
        "CUDAExecutionProvider",
        "CPUExecutionProvider",
    ]
    assert select_providers(["AzureExecutionProvider", "CPUExecutionProvider"]) == ["CPUExecutionProvider"]
    assert select_providers()[-1] == "CPUExecutionProvider"


def test_missing_artifact_files_are_clear_errors(tmp_path: Path) -> None:
    with pytest.raises(ArtifactError, match=r"has no model\.onnx"):
        load_weights(tmp_path)
    (tmp_path / "model.onnx").write_bytes(b"x")
    (tmp_path / "model.onnx_data").write_bytes(b"xy")
    weights = load_weights(tmp_path)  # external data (weights over 2 GB) is read into RAM with the graph
    assert (weights.nbytes, weights.external) == (3, {"model.onnx_data": b"xy"})


def test_two_model_ids_share_one_weights_and_one_session(tiny_llama_dir: Path) -> None:
    registry = ArtifactRegistry(["CPUExecutionProvider"])
    first = registry.load("billing", tiny_llama_dir)
    second = registry.load("technical", str(tiny_llama_dir) + "/")  # same path, spelled differently
    assert (first.from_tier, first.to_tier, first.shared) == ("unloaded", "standby", False)
    assert first.bytes_loaded == registry.weights("billing").nbytes > 0
    assert second.shared
    assert second.bytes_loaded == 0
    assert registry.weights("billing") is registry.weights("technical")
    assert len(registry.usage()) == 1

    with pytest.raises(InferenceError, match="not resident"):
        registry.session("billing")
    up1 = registry.promote("billing")
    up2 = registry.promote("technical")
    assert up1.provider == "CPUExecutionProvider"
    assert not up1.shared
    assert up2.shared
    assert registry.session("billing") is registry.session("technical")
    assert registry.tier("billing") == "resident"

    down = registry.demote("billing")  # technical still resident: the session stays
    assert down.shared
    assert registry.usage()[0].has_session
    registry.demote("technical")
    assert not registry.usage()[0].has_session
    assert registry.tier("technical") == "standby"

    gone1 = registry.unload("billing")
    assert gone1.bytes_freed == 0  # technical still holds the bytes
    gone2 = registry.unload("technical")
    assert gone2.bytes_freed == first.bytes_loaded
    assert registry.usage() == []
    assert registry.tier("billing") == "unloaded"


def test_a_model_id_cannot_hold_two_artifacts(tiny_llama_dir: Path, tiny_bert_dir: Path) -> None:
    registry = ArtifactRegistry(["CPUExecutionProvider"])
    registry.load("m", tiny_llama_dir)
    with pytest.raises(InferenceError, match="already holds"):
        registry.load("m", tiny_bert_dir)
    same = registry.load("m", tiny_llama_dir)
    assert same.from_tier == same.to_tier == "standby"
