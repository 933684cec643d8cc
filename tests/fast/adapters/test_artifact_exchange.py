"""The disk side of sharing artifacts: what a variant publishes, and installing a fetched one (no bus)."""

from __future__ import annotations

import hashlib
from pathlib import Path

import pytest

from nrt.adapters.catalogue import ArtifactError, ArtifactRecord, load_record, save_record
from nrt.adapters.catalogue.checkpoints import LABEL_FILE
from nrt.adapters.catalogue.exchange import describe_variant, install_fetched, local_digests, variant_files
from nrt.adapters.catalogue.published import digest_of, variant_manifest
from nrt.adapters.catalogue.record import with_files

NAME = "user-demo-0123456789ab"


def _record(provider: str = "cpu") -> ArtifactRecord:
    return ArtifactRecord(
        name=NAME,
        kind="encoder",
        source="hf://acme/demo@abc",
        recipe="checkpoint/1+fp32/1",
        provider=provider,  # type: ignore[arg-type]
        context_length=8,
        tokenizer_adds_special_tokens=True,
        hidden_size=4,
        pooling="mean",
        normalize=True,
        hidden_state_output="last_hidden_state",
    )


def _variant(directory: Path, provider: str = "cpu", graph: bytes = b"graph") -> None:
    directory.mkdir(parents=True, exist_ok=True)
    (directory / "model.onnx").write_bytes(graph)
    (directory / "tokenizer.json").write_text("{}")
    (directory / "config.json").write_text('{"model_type": "bert"}')
    (directory / "tokenizer_config.json").write_text('{"chat_template": "x"}')  # a companion the record omits
    save_record(directory, with_files(_record(provider), directory))


@pytest.fixture
def models(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    monkeypatch.setenv("NRT_HOME", str(tmp_path / "home"))
    return tmp_path / "home" / "models"


def test_a_variant_publishes_every_file_of_its_directory_but_local_names(models: Path) -> None:
    root = models / NAME
    _variant(root)
    _variant(root / "cuda", "cuda", b"fp16 graph")
    (root / LABEL_FILE).write_text("my-demo\n")
    (root / ".demo.lock").write_text("")
    files = variant_files(root)
    assert [f.path for f in files] == [
        "config.json",
        "model.onnx",
        "nrt-artifact.json",
        "tokenizer.json",
        "tokenizer_config.json",
    ]
    for entry in files:
        assert entry.sha256 == hashlib.sha256((root / entry.path).read_bytes()).hexdigest()
    variant = describe_variant(NAME, "cpu")
    assert variant is not None
    assert (variant.source, variant.recipe, variant.digest) == (
        "hf://acme/demo@abc",
        "checkpoint/1+fp32/1",
        digest_of(files),
    )
    assert set(local_digests(NAME)) == {"cpu", "cuda"}
    assert describe_variant("user-none", "cpu") is None


def test_a_variant_whose_files_do_not_match_its_record_is_not_published(models: Path) -> None:
    _variant(models / NAME)
    (models / NAME / "model.onnx").write_bytes(b"graph, rewritten")
    with pytest.raises(ArtifactError, match="does not match its record"):
        variant_files(models / NAME)
    assert describe_variant(NAME, "cpu") is None


def test_a_fetched_root_replaces_the_root_and_keeps_the_other_variants(models: Path, tmp_path: Path) -> None:
    root = models / NAME
    _variant(root, graph=b"old graph")
    _variant(root / "cuda", "cuda", b"fp16 graph")
    source = tmp_path / "elsewhere"
    _variant(source, graph=b"new graph")
    staged = models / ".staging-fetched"
    staged.mkdir()
    for path in source.iterdir():
        (staged / path.name).write_bytes(path.read_bytes())
    published = variant_manifest(NAME, "cpu", "hf://acme/demo@abc", "checkpoint/1+fp32/1", variant_files(source))
    assert install_fetched(staged, published) == root
    assert (root / "model.onnx").read_bytes() == b"new graph"
    assert (root / "cuda" / "model.onnx").read_bytes() == b"fp16 graph"
    assert load_record(root).provider == "cpu"


def test_a_fetch_that_lacks_a_file_is_not_installed(models: Path, tmp_path: Path) -> None:
    source = tmp_path / "elsewhere"
    _variant(source)
    published = variant_manifest(NAME, "cpu", "hf://acme/demo@abc", "checkpoint/1+fp32/1", variant_files(source))
    staged = tmp_path / "staged"
    staged.mkdir()
    (staged / "model.onnx").write_bytes(b"graph")
    with pytest.raises(ArtifactError, match="lacks"):
        install_fetched(staged, published)
    assert not (models / NAME).exists()
