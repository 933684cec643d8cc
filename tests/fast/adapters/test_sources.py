from __future__ import annotations

import re
from pathlib import Path, PurePosixPath

import pytest

from nrt.adapters.catalogue import (
    AnthropicSource,
    CatalogueSource,
    HubEndpoint,
    LocalSource,
    RemoteSource,
    SourceError,
    catalogue_names,
    resolve_source,
)
from nrt.adapters.catalogue.sources import GgufSource, HfSource, served_remotely


@pytest.mark.parametrize("name", ["gemma3-270m", "minilm-l6", "tiny-llama"])
def test_catalogue_scheme_names_a_builtin(name: str) -> None:
    assert resolve_source(f"catalogue://{name}") == CatalogueSource(name=name)


def test_unknown_catalogue_name_lists_the_available_ones() -> None:
    with pytest.raises(SourceError) as error:
        resolve_source("catalogue://gpt-5")
    message = str(error.value)
    assert "'gpt-5' is not in the catalogue" in message
    for name in catalogue_names():
        assert f"catalogue://{name}" in message


def test_plain_paths_are_local_directories() -> None:
    assert resolve_source("/srv/models/router") == LocalSource(path="/srv/models/router")
    assert resolve_source("~/models/router") == LocalSource(path="~/models/router")
    assert resolve_source("./models/router") == LocalSource(path="./models/router")


def test_relative_paths_resolve_against_the_manifest_directory() -> None:
    base = PurePosixPath("/etc/nrt")
    assert resolve_source("models/router", base_dir=base) == LocalSource(path="/etc/nrt/models/router")
    assert resolve_source("/abs/router", base_dir=base) == LocalSource(path="/abs/router")


def test_resolution_is_pure(tmp_path: Path) -> None:
    missing = tmp_path / "does-not-exist"
    assert resolve_source(str(missing)) == LocalSource(path=str(missing))
    assert not missing.exists()


@pytest.mark.parametrize(
    ("source", "path"),
    [
        ("/srv/models/qwen2.5-0.5b-q4_k_m.gguf", "/srv/models/qwen2.5-0.5b-q4_k_m.gguf"),
        ("~/models/x.gguf", "~/models/x.gguf"),
        ("./x.gguf", "./x.gguf"),
        ("x.GGUF", "x.GGUF"),
        ("file:///srv/models/my%20model.gguf", "/srv/models/my model.gguf"),
        ("file://localhost/srv/x.gguf", "/srv/x.gguf"),
    ],
)
def test_a_path_ending_in_gguf_is_a_gguf_file(source: str, path: str) -> None:
    assert resolve_source(source) == GgufSource(path=path)
    assert str(resolve_source(source)) == path


def test_a_relative_gguf_path_resolves_against_the_manifest_directory(tmp_path: Path) -> None:
    base = PurePosixPath("/etc/nrt")
    assert resolve_source("models/x.gguf", base_dir=base) == GgufSource(path="/etc/nrt/models/x.gguf")
    assert resolve_source("file:///abs/x.gguf", base_dir=base) == GgufSource(path="/abs/x.gguf")
    assert resolve_source(str(tmp_path / "absent.gguf")) == GgufSource(path=str(tmp_path / "absent.gguf"))  # pure


@pytest.mark.parametrize("source", ["./models/gguf", "./models/x.gguf.d", "/srv/gguf-models/router"])
def test_a_path_that_does_not_end_in_gguf_stays_a_directory(source: str) -> None:
    assert resolve_source(source) == LocalSource(path=source)


def test_file_urls_are_local_directories() -> None:
    assert resolve_source("file:///srv/models/my%20router") == LocalSource(path="/srv/models/my router")
    assert resolve_source("file://localhost/srv/x") == LocalSource(path="/srv/x")
    with pytest.raises(SourceError, match="must name a local path"):
        resolve_source("file://otherhost/srv/x")


@pytest.mark.parametrize(
    ("source", "base_url"),
    [
        ("https://api.example.com/v1", "https://api.example.com/v1"),
        ("http://127.0.0.1:8080/v1/", "http://127.0.0.1:8080/v1"),
        ("HTTPS://gateway.internal/openai/v1", "https://gateway.internal/openai/v1"),
    ],
)
def test_openai_compatible_endpoints_are_remote(source: str, base_url: str) -> None:
    assert resolve_source(source) == RemoteSource(base_url=base_url)


@pytest.mark.parametrize("source", ["https://api.example.com", "https://api.example.com/v1/chat/completions"])
def test_remote_sources_must_be_a_v1_base_url(source: str) -> None:
    with pytest.raises(SourceError, match="ending in /v1"):
        resolve_source(source)


@pytest.mark.parametrize(
    ("source", "repo", "revision"),
    [
        ("hf://neurometric/router-1b-v2", "neurometric/router-1b-v2", None),
        ("hf://HuggingFaceTB/SmolLM2-135M-Instruct@main", "HuggingFaceTB/SmolLM2-135M-Instruct", "main"),
        ("hf://gpt2@0123456789abcdef0123456789abcdef01234567", "gpt2", "0123456789abcdef0123456789abcdef01234567"),
        ("HF://org/name/", "org/name", None),
    ],
)
def test_hub_sources_name_a_repository_and_maybe_a_revision(source: str, repo: str, revision: str | None) -> None:
    assert resolve_source(source) == HfSource(repo=repo, revision=revision)
    assert str(HfSource(repo=repo, revision=revision)) == f"hf://{repo}" + (f"@{revision}" if revision else "")


@pytest.mark.parametrize(
    "source", ["hf://", "hf://org/na me", "hf://a/b/c", "hf://-org/x", "hf://org/x@", "hf://o/x@a..b"]
)
def test_a_malformed_hub_source_says_what_is_expected(source: str) -> None:
    with pytest.raises(SourceError, match=r"hf://<org>/<name>\[@revision\]|not a branch, tag or commit"):
        resolve_source(source)


def test_an_unknown_scheme_says_how_to_map_it() -> None:
    with pytest.raises(SourceError) as error:
        resolve_source("s3://bucket/router-1b-v2")
    message = str(error.value)
    assert "cannot be fetched" in message
    assert "catalogue://gemma3-270m" in message  # how to map it: a built-in name...
    assert "hf://org/name" in message  # ...a Hugging Face model...
    assert "local ONNX export directory" in message  # ...or a local export
    assert "model.onnx" in message


@pytest.mark.parametrize("source", ["s3://bucket/model", "ollama://llama3"])
def test_other_schemes_are_errors(source: str) -> None:
    with pytest.raises(SourceError, match="cannot be fetched"):
        resolve_source(source)


def test_empty_source_is_an_error() -> None:
    with pytest.raises(SourceError, match="empty"):
        resolve_source("  ")


@pytest.mark.parametrize("model", ["claude-haiku-3", "claude-3-5-haiku-20241022", "claude-haiku-4-5@20251001"])
def test_anthropic_sources_name_a_model_at_the_messages_api(model: str) -> None:
    assert resolve_source(f"anthropic://{model}") == AnthropicSource(model=model)
    assert str(AnthropicSource(model=model)) == f"anthropic://{model}"


@pytest.mark.parametrize(
    ("source", "served"),
    [
        ("hf://anthropic/claude-haiku", HubEndpoint(repo="anthropic/claude-haiku")),
        ("hf://Qwen/Qwen3-0.6B", HubEndpoint(repo="Qwen/Qwen3-0.6B")),
        ("https://api.example.com/v1", RemoteSource(base_url="https://api.example.com/v1")),
        ("anthropic://claude-haiku-3", AnthropicSource(model="claude-haiku-3")),
    ],
)
def test_a_model_at_tier_remote_is_served_by_the_endpoint_its_source_names(source: str, served: object) -> None:
    assert served_remotely(resolve_source(source), source) == served
    assert str(served) == source


@pytest.mark.parametrize(
    ("source", "message"),
    [
        ("hf://org/name@v2", "cannot pin one: remove '@v2'"),
        ("catalogue://tiny-llama", "is loaded by a worker; tier 'remote' is for a model served by an endpoint"),
        ("./models/router", "is loaded by a worker"),
    ],
)
def test_what_an_endpoint_cannot_serve_at_tier_remote_is_a_clear_error(source: str, message: str) -> None:
    with pytest.raises(SourceError, match=re.escape(message)):
        served_remotely(resolve_source(source), source)
