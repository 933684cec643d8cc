"""What a prepared artifact looks like on the bus, and whether a worker fetches it or prepares it (pure)."""

from __future__ import annotations

import hashlib

import msgspec
import pytest

from nrt.adapters.catalogue.published import (
    Fetch,
    Prepare,
    PublishedVariant,
    SourceAlias,
    UseLocal,
    alias_object,
    blob_object,
    decide,
    digest_of,
    file_problem,
    source_key,
    variant_manifest,
    variant_object,
)
from nrt.adapters.catalogue.record import FileEntry


def entry(path: str, content: bytes) -> FileEntry:
    return FileEntry(path=path, sha256=hashlib.sha256(content).hexdigest(), bytes=len(content))


FILES = (entry("model.onnx", b"graph"), entry("tokenizer.json", b"{}"), entry("nrt-artifact.json", b"{record}"))


def variant(provider: str = "cpu", recipe: str = "checkpoint/1+int8/1", files: tuple[FileEntry, ...] = FILES):
    return variant_manifest("user-acme-billing-0123", provider, "hf://acme/billing@abc", recipe, files)  # type: ignore[arg-type]


def test_the_digest_names_the_files_bytes_whatever_their_order() -> None:
    assert digest_of(FILES) == digest_of(tuple(reversed(FILES)))
    changed = (entry("model.onnx", b"graph!"), *FILES[1:])
    assert digest_of(changed) != digest_of(FILES)
    renamed = (entry("model2.onnx", b"graph"), *FILES[1:])
    assert digest_of(renamed) != digest_of(FILES)
    assert len(digest_of(FILES)) == 64


def test_a_manifest_round_trips_and_refuses_a_wrong_digest_or_an_unsafe_file() -> None:
    published = variant()
    assert msgspec.json.decode(msgspec.json.encode(published), type=PublishedVariant) == published
    assert published.total_bytes == sum(f.bytes for f in FILES)
    forged = msgspec.json.encode(published).replace(published.digest.encode(), b"0" * 64)
    with pytest.raises(msgspec.ValidationError, match="does not match its digest"):
        msgspec.json.decode(forged, type=PublishedVariant)
    for path in ("../etc/passwd", "cuda/model.onnx", ".hidden", ""):
        with pytest.raises(ValueError, match="not a plain file name"):
            variant(files=(entry(path, b"x"),))
    with pytest.raises(ValueError, match="lists no files"):
        variant(files=())
    with pytest.raises(ValueError, match="invalid sha256"):
        variant(files=(FileEntry(path="model.onnx", sha256="not-hex", bytes=1),))


def test_object_names() -> None:
    sha = FILES[0].sha256
    assert blob_object(sha) == f"sha256/{sha}"
    assert variant_object("tiny-llama", "cuda") == "artifacts/tiny-llama/cuda"
    assert alias_object("hf://a/b") != alias_object("hf://a/b#int4")
    assert alias_object("hf://a/b").startswith("sources/")
    assert source_key(" hf://a/b ", None) == "hf://a/b"
    assert source_key("hf://a/b", "int4") == "hf://a/b#int4"
    alias = SourceAlias(key="hf://a/b", name="user-a-b-1")
    assert msgspec.json.decode(msgspec.json.encode(alias), type=SourceAlias) == alias


def test_a_fetched_file_is_installed_only_with_the_published_size_and_hash() -> None:
    good = FILES[0]
    assert file_problem(good, good.sha256, good.bytes) is None
    short = file_problem(good, good.sha256, good.bytes - 1)
    assert short is not None
    assert "model.onnx has 4 bytes, the published manifest says 5" in short
    tampered = file_problem(good, hashlib.sha256(b"other").hexdigest(), good.bytes)
    assert tampered is not None
    assert "sha256" in tampered


def test_fetch_when_published_and_not_here() -> None:
    cpu = variant()
    assert decide("cpu", {"cpu": cpu}, {}) == Fetch(cpu)
    assert decide("cpu", {"cpu": cpu}, {"cpu": "f" * 64}) == Fetch(cpu)  # another build here: the cluster's wins


def test_use_what_is_here_when_it_is_what_was_published() -> None:
    cpu = variant()
    assert decide("cpu", {"cpu": cpu}, {"cpu": cpu.digest}) == UseLocal(cpu)


def test_the_hosts_own_variant_is_preferred_then_the_root_one() -> None:
    cpu, cuda = variant(), variant("cuda", "checkpoint/1+fp16/1", (entry("model.onnx", b"fp16"),))
    assert decide("cuda", {"cpu": cpu, "cuda": cuda}, {}) == Fetch(cuda)
    assert decide("cuda", {"cpu": cpu}, {}) == Fetch(cpu)  # the root runs anywhere
    assert decide("cpu", {"cuda": cuda}, {}) == Prepare("the cluster has published no variant of it that serves cpu")


def test_prepare_when_nothing_is_published_or_its_recipe_is_not_this_hosts() -> None:
    assert isinstance(decide("cpu", {}, {}), Prepare)
    old = variant(recipe="checkpoint/1+int8/0")
    decision = decide("cpu", {"cpu": old}, {}, {"cpu": "checkpoint/1+int8/1", "cuda": "checkpoint/1+fp16/1"})
    assert isinstance(decision, Prepare)
    assert "built by recipe checkpoint/1+int8/0, this host's is checkpoint/1+int8/1" in decision.reason
    # a host that cannot resolve the source knows no recipe: it takes what the cluster prepared
    assert decide("cpu", {"cpu": old}, {}, None) == Fetch(old)
