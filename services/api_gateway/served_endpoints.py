"""Which OpenAI/Anthropic endpoints each model of the manifest serves, from what the model is.

An encoder embeds (``embeddings``); a generative model chats and completes raw text
(``chat.completions``, ``messages``, ``completions``); a remote model chats only; the entry
model routes chat whatever it is (and embeds when it is an encoder). A model's kind comes from
its prepared artifact or the catalogue (``nrt.adapters.manifest_sources.kind_of``). A model this
gateway's machine cannot tell (a local or Hub source it does not hold) is listed as generative, and
its requests go to its worker, which refuses what the model cannot do (a 400 naming the model).
"""

from __future__ import annotations

from typing import Literal

from api_gateway.errors import ApiError
from nrt.adapters.manifest_sources import kind_of
from nrt.core.manifest import Manifest, ModelSpec
from nrt.core.vocabulary import Tier

Endpoint = Literal["chat.completions", "messages", "completions", "embeddings"]
Kind = Literal["causal-lm", "encoder"]
CHAT: tuple[Endpoint, ...] = ("chat.completions", "messages")

_kinds: dict[str, Kind] = {}  # source -> kind, once known (a source not prepared yet is asked again)


def model_kind(spec: ModelSpec) -> Kind | None:
    remote = spec.tier == Tier.REMOTE
    key = f"remote:{spec.source}" if remote else spec.source
    if key not in _kinds:
        found = kind_of(spec.source, remote=remote)
        if found is None:
            return None
        _kinds[key] = found
    return _kinds[key]


def endpoints_of(kind: Kind | None, entry: bool, remote: bool) -> list[Endpoint]:
    """What a model of ``kind`` serves (``entry``: the manifest's entry model, which routes chat)."""
    if kind == "encoder":
        return [*CHAT, "embeddings"] if entry else ["embeddings"]
    if entry or remote:
        return list(CHAT)
    return [*CHAT, "completions"]


def served(manifest: Manifest, model: str) -> list[Endpoint]:
    spec = manifest.model(model)
    return endpoints_of(model_kind(spec), model == manifest.routing.entry, spec.tier == Tier.REMOTE)


def require_endpoint(manifest: Manifest, version: int, model: str, endpoint: Endpoint) -> None:
    """404 for a model not in the manifest; 400 naming the model and what it serves when not ``endpoint``."""
    if model not in manifest.model_ids:
        valid = ", ".join(f"'{m}'" for m in manifest.model_ids)
        raise ApiError(
            404,
            f"model '{model}' does not exist in manifest v{version}; valid: {valid}",
            code="model_not_found",
            param="model",
        )
    spec = manifest.model(model)
    entry, kind = model == manifest.routing.entry, model_kind(spec)
    endpoints = endpoints_of(kind, entry, spec.tier == Tier.REMOTE)
    if kind is None and not (endpoint == "completions" and entry):
        return  # this machine cannot tell what the model is: its worker answers, or refuses naming the model
    if endpoint not in endpoints:
        why = " (the entry model routes chat requests)" if model == manifest.routing.entry else ""
        raise ApiError(
            400,
            f"model '{model}' does not serve /v1/{endpoint}{why}; it serves: "
            + ", ".join(f"/v1/{e}" for e in endpoints),
            code="unsupported_model",
            param="model",
        )
