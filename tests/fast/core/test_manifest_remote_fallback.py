"""The spec example's fallback on the remote tier: ``hf://anthropic/claude-haiku`` as written (an inference
endpoint of Hub models serves it, its key in $HF_TOKEN), or ``anthropic://claude-haiku-3`` (the Messages
API, its key in $ANTHROPIC_API_KEY): each parses, resolves on a worker with its key's variable
(``api_key_env`` names another) and fails clearly without it."""

from __future__ import annotations

import pytest

from nrt.adapters.bus.errors import RemoteError
from nrt.adapters.catalogue import AnthropicSource, SourceError, resolve_source
from nrt.adapters.manifest_sources import source_warnings
from nrt.core.manifest import ManifestError, ModelSpec, Tier, parse_manifest
from nrt.hosting.model_sources import RemoteEndpoint, resolve
from paths import FIXTURES

SPEC = FIXTURES / "spec-customer-support.yaml"
SPEC_FALLBACK = "fallback:\n  source: hf://anthropic/claude-haiku\n  tier: remote\n"


def spec_with_fallback(*lines: str) -> str:
    text = SPEC.read_text()
    assert SPEC_FALLBACK in text
    return text.replace(SPEC_FALLBACK, "fallback:\n" + "".join(f"  {line}\n" for line in lines))


def fallback(*lines: str) -> ModelSpec:
    spec = parse_manifest(spec_with_fallback(*lines)).fallback
    assert spec is not None
    return spec


def test_the_spec_example_parses_unchanged_and_its_fallback_is_served_by_an_inference_endpoint(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    manifest = parse_manifest(SPEC.read_text())
    assert manifest.fallback is not None
    assert (manifest.fallback.source, manifest.fallback.tier) == ("hf://anthropic/claude-haiku", Tier.REMOTE)
    assert not [w for w in source_warnings(manifest) if w.startswith("fallback:")]
    monkeypatch.setenv("HF_TOKEN", "hf_test")
    assert resolve(manifest.fallback.source, manifest.fallback) == RemoteEndpoint(
        base_url="https://router.huggingface.co/v1", model="anthropic/claude-haiku", api_key_env="HF_TOKEN"
    )
    # a worker's NRT_WORKER_HF_INFERENCE_URL names another server of Hub models; the entry's base_url wins over it
    assert resolve(manifest.fallback.source, manifest.fallback, hub_url="http://tgi:8080/v1/") == RemoteEndpoint(
        base_url="http://tgi:8080/v1", model="anthropic/claude-haiku", api_key_env="HF_TOKEN"
    )
    pinned = fallback("source: hf://anthropic/claude-haiku", "tier: remote", "base_url: http://vllm:8000/v1")
    assert resolve(pinned.source, pinned, hub_url="http://tgi:8080/v1") == RemoteEndpoint(
        base_url="http://vllm:8000/v1", model="anthropic/claude-haiku", api_key_env="HF_TOKEN"
    )


def test_the_hub_model_at_tier_remote_needs_its_key(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv("HF_TOKEN", raising=False)
    manifest = parse_manifest(SPEC.read_text())
    assert manifest.fallback is not None
    with pytest.raises(RemoteError) as info:
        resolve(manifest.fallback.source, manifest.fallback)
    assert (info.value.code, info.value.status) == ("remote_key_missing", 503)
    assert "needs its API key in $HF_TOKEN" in info.value.message


def test_the_anthropic_fallback_parses_and_resolves_with_the_default_key_variable(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    spec = fallback("source: anthropic://claude-haiku-3", "tier: remote")
    assert resolve_source(spec.source) == AnthropicSource(model="claude-haiku-3")
    assert not [
        w
        for w in source_warnings(parse_manifest(spec_with_fallback(f"source: {spec.source}", "tier: remote")))
        if w.startswith("fallback:")
    ]
    monkeypatch.setenv("ANTHROPIC_API_KEY", "sk-ant-test")
    assert resolve(spec.source, spec) == RemoteEndpoint(
        base_url="https://api.anthropic.com",
        model="claude-haiku-3",
        api_key_env="ANTHROPIC_API_KEY",
        protocol="anthropic",
    )


def test_api_key_env_and_base_url_are_the_manifests_choice(monkeypatch: pytest.MonkeyPatch) -> None:
    spec = fallback(
        "source: anthropic://claude-haiku-3",
        "tier: remote",
        "api_key_env: SUPPORT_CLAUDE_KEY",
        "base_url: http://127.0.0.1:8080/",
    )
    monkeypatch.setenv("SUPPORT_CLAUDE_KEY", "sk-ant-test")
    endpoint = resolve(spec.source, spec)
    assert isinstance(endpoint, RemoteEndpoint)
    assert (endpoint.base_url, endpoint.api_key_env, endpoint.api_key()) == (
        "http://127.0.0.1:8080",
        "SUPPORT_CLAUDE_KEY",
        "sk-ant-test",
    )


@pytest.mark.parametrize(
    ("key_line", "variable"), [((), "ANTHROPIC_API_KEY"), (("api_key_env: SUPPORT_CLAUDE_KEY",), "SUPPORT_CLAUDE_KEY")]
)
def test_without_its_key_the_load_fails_naming_the_variable(
    monkeypatch: pytest.MonkeyPatch, key_line: tuple[str, ...], variable: str
) -> None:
    monkeypatch.delenv(variable, raising=False)
    spec = fallback("source: anthropic://claude-haiku-3", "tier: remote", *key_line)
    with pytest.raises(RemoteError) as info:
        resolve(spec.source, spec)
    assert (info.value.code, info.value.status) == ("remote_key_missing", 503)
    assert f"needs its API key in ${variable}, which is not set" in info.value.message


def test_an_openai_compatible_endpoint_takes_its_model_name_and_key_variable(monkeypatch: pytest.MonkeyPatch) -> None:
    spec = fallback(
        "source: http://127.0.0.1:9000/v1", "tier: remote", "remote_model: billing", "api_key_env: REMOTE_NRT_KEY"
    )
    monkeypatch.delenv("REMOTE_NRT_KEY", raising=False)
    with pytest.raises(RemoteError, match=r"\$REMOTE_NRT_KEY"):
        resolve(spec.source, spec)
    monkeypatch.setenv("REMOTE_NRT_KEY", "k")
    assert resolve(spec.source, spec) == RemoteEndpoint(
        base_url="http://127.0.0.1:9000/v1", model="billing", api_key_env="REMOTE_NRT_KEY", protocol="openai"
    )


@pytest.mark.parametrize(
    ("lines", "path", "message"),
    [
        (
            ("source: anthropic://claude-haiku-3", "tier: standby"),
            "fallback.tier",
            "an anthropic:// source is served remotely; tier must be 'remote'",
        ),
        (
            ("source: anthropic://claude-haiku-3", "tier: remote", "remote_model: x"),
            "fallback.remote_model",
            "names its model itself",
        ),
        (
            ("source: anthropic://claude-haiku-3", "tier: remote", "base_url: api.anthropic.com"),
            "fallback.base_url",
            "expected an http(s) URL",
        ),
        (
            ("source: http://h/v1", "tier: remote", "base_url: http://h"),
            "fallback.base_url",
            "an http(s) source is its own base URL",
        ),
        (
            ("source: hf://org/model", "tier: standby", "base_url: http://h/v1"),
            "fallback.base_url",
            "an hf:// source at tier remote",
        ),
        (("source: hf://org/model@v2", "tier: remote"), "fallback.source", "cannot pin one: remove '@<revision>'"),
        (("source: hf://org/model", "tier: remote", "remote_model: x"), "fallback.remote_model", "names its model"),
        (("source: catalogue://tiny-llama", "tier: remote"), "fallback.tier", "this source is loaded by a worker"),
    ],
)
def test_remote_fields_that_do_not_fit_are_clear_errors(lines: tuple[str, ...], path: str, message: str) -> None:
    with pytest.raises(ManifestError) as info:
        parse_manifest(spec_with_fallback(*lines), "m.yaml")
    assert [p for p in info.value.problems if p.path == path and message in p.message], str(info.value)


@pytest.mark.parametrize("source", ["anthropic://", "anthropic://claude/haiku"])
def test_an_anthropic_source_must_name_one_model(source: str) -> None:
    with pytest.raises(SourceError, match="expected anthropic://<model name>"):
        resolve_source(source)
