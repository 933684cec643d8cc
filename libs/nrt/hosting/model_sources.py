"""Manifest ``source`` strings to what the worker loads: a prepared artifact directory or a remote endpoint.

Where a source is, or why it cannot be used here, is the catalogue's (``nrt.adapters.catalogue.locate``,
which ``nrt manifest check`` uses too); this module turns that into the worker's load errors
and adds what a remote endpoint needs: its key must be in the variable that holds it (a load
fails at once, naming it).
"""

from __future__ import annotations

import hashlib
import logging
import os
from pathlib import Path
from typing import Literal

import msgspec

from nrt.adapters.bus.errors import BadRequest, Unavailable
from nrt.adapters.catalogue import (
    ANTHROPIC_BASE_URL,
    ANTHROPIC_KEY_ENV,
    HF_INFERENCE_URL,
    HF_TOKEN_ENV,
    AnthropicSource,
    HubEndpoint,
    LocatedArtifact,
    NotAnExport,
    NotPrepared,
    PreparedModel,
    Provider,
    RecordError,
    SourceError,
    catalogue_names,
    default_providers,
    get_entry,
    host_provider,
    load_record,
    locate,
    prepare,
)
from nrt.adapters.catalogue.checkpoints import checkpoint_entry
from nrt.adapters.catalogue.locate import CheckpointNotPrepared, Endpoint
from nrt.adapters.catalogue.published import source_key
from nrt.core.events import Weights, WeightsOrigin
from nrt.core.manifest import ModelSpec, Tier, WeightFormat
from nrt.hosting.artifact_share import ArtifactShare, Obtained

log = logging.getLogger("nrt.worker")

RemoteProtocol = Literal["openai", "anthropic"]  # OpenAI chat completions, or the Anthropic Messages API


class LocalArtifact(msgspec.Struct, frozen=True):
    path: str
    origin: WeightsOrigin = "cache"  # how it got here for this load: found prepared, prepared, or fetched


class RemoteEndpoint(msgspec.Struct, frozen=True, kw_only=True):
    base_url: str  # openai: the API root ending in /v1; anthropic: the root that /v1/messages is under
    model: str  # the model's name at the endpoint
    api_key_env: str | None = None  # the variable holding the endpoint's key (None: it takes none)
    protocol: RemoteProtocol = "openai"

    def api_key(self) -> str | None:
        """The endpoint's key, read now (a rotated key is used at once); a clear 503 when its variable is unset."""
        if self.api_key_env is None:
            return None
        key = os.environ.get(self.api_key_env)
        if not key:
            raise Unavailable(
                f"the remote endpoint {self.base_url} needs its API key in ${self.api_key_env}, "
                f"which is not set on this worker",
                code="remote_key_missing",
            )
        return key


def resolve(
    source: str,
    spec: ModelSpec | None = None,
    provider: Provider | None = None,
    *,
    hub_url: str = HF_INFERENCE_URL,
    share: ArtifactShare | None = None,
) -> LocalArtifact | RemoteEndpoint:
    """Where ``source`` lives on this worker (``spec``: its manifest entry, for a remote endpoint's
    model name, key variable and base URL); a clear error when it cannot be served here.

    An artifact resolves to its variant for ``provider`` (default: the one this worker's sessions
    run on, ``cuda`` with onnxruntime-gpu and a GPU) when that is built, else to its root variant
    (:func:`nrt.adapters.catalogue.locate`). An operator's checkpoint (``hf://``, or a local Hugging
    Face checkpoint) is fetched into the Hugging Face cache and prepared here the first time, once
    per host (the catalogue's build lock: a second worker waits for the first one's build).

    With ``share`` (the cluster's artifact store), an artifact this host has not prepared is fetched
    from there when another host published it, before any download or conversion; one it prepared,
    or found prepared, is published there for the others (``nrt.hosting.artifact_share``).
    """
    provider = provider or host_provider()
    remote = spec is not None and spec.tier is Tier.REMOTE
    weights = spec.quantization if spec is not None else None
    try:
        if share is None or remote:
            located: LocatedArtifact | Endpoint | LocalArtifact = _located(source, provider, weights, remote)
        else:
            located = _shared(source, provider, weights, share)
    except NotPrepared as exc:
        raise Unavailable(
            f"catalogue model '{exc.name}' is not prepared on this worker; run `nrt models prepare {exc.name}`",
            code="model_not_prepared",
        ) from None
    except NotAnExport as exc:
        raise BadRequest(str(exc)) from None
    except SourceError as exc:
        raise BadRequest(str(exc), code="unresolvable_source") from exc
    if isinstance(located, LocalArtifact):
        return located
    if not isinstance(located, LocatedArtifact):
        endpoint = remote_endpoint(located, spec, hub_url)
        endpoint.api_key()  # its key is there now, or the load fails naming the variable
        return endpoint
    if located.catalogue is not None:
        _say_which_variant(located.catalogue, provider)
    return LocalArtifact(str(located.directory))


def _located(source: str, provider: Provider, weights: WeightFormat | None, remote: bool) -> LocatedArtifact | Endpoint:
    try:
        return locate(source, provider, fetch=True, weights=weights, remote=remote)
    except CheckpointNotPrepared as missing:
        checkpoint = missing.checkpoint
        log.info("preparing %s (%s) for this host: %s", checkpoint.provenance, checkpoint.model_type, checkpoint.name)
        try:
            providers: tuple[Provider, ...] = ("cuda",) if weights is WeightFormat.FP16 else default_providers()
            prepare(checkpoint.name, entry=checkpoint_entry(checkpoint), providers=providers)
        except Exception as exc:  # the exporters raise their own errors: each is this model's load failure
            log.exception("preparing %s failed", checkpoint.provenance)
            raise SourceError(f"{checkpoint.provenance} could not be prepared: {_first_line(exc)}") from exc
        return locate(source, provider, fetch=False, weights=weights)


def _shared(
    source: str, provider: Provider, weights: WeightFormat | None, share: ArtifactShare
) -> LocatedArtifact | Endpoint | LocalArtifact:
    """``_located``, with the cluster's artifact store: fetched from it before this host prepares anything,
    or when this host cannot resolve the source at all (no Hub, an empty Hugging Face cache, another host's
    path); published to it when this host prepared it or found it prepared."""
    key = source_key(source, weights.value if weights is not None else None)
    try:
        located = locate(source, provider, fetch=True, weights=weights)
    except CheckpointNotPrepared as missing:
        checkpoint = missing.checkpoint
        entry = checkpoint_entry(checkpoint)
        recipes = {variant.provider: variant.recipe for variant in entry.variants}
        fetched = share.obtain(key, provider, name=checkpoint.name, recipes=recipes)
        if fetched is not None:
            return _obtained(fetched)
        located = _located(source, provider, weights, False)
        if isinstance(located, LocatedArtifact) and located.catalogue is not None:
            share.offer(key, located.catalogue.name)
            return LocalArtifact(str(located.directory), origin="prepared")
        return located
    except NotPrepared as missing:  # a catalogue model this host has not prepared
        if missing.name not in catalogue_names():
            raise
        recipes = {variant.provider: variant.recipe for variant in get_entry(missing.name).variants}
        fetched = share.obtain(key, provider, name=missing.name, recipes=recipes)
        if fetched is None:
            raise
        return _obtained(fetched)
    except SourceError:  # not resolvable here: what the cluster prepared under this source serves it
        fetched = share.obtain(key, provider)
        if fetched is None:
            raise
        return _obtained(fetched)
    if isinstance(located, LocatedArtifact) and located.catalogue is not None:
        share.offer(key, located.catalogue.name)
    return located


def _obtained(obtained: Obtained) -> LocalArtifact:
    return LocalArtifact(str(obtained.directory.resolve()), origin="fetched" if obtained.fetched else "cache")


def weights_of(target: LocalArtifact | RemoteEndpoint) -> Weights | None:
    """Exactly which weights ``target`` serves (its artifact record: provenance, variant, file hashes),
    for the log; None for a remote endpoint, or an artifact without a record."""
    if not isinstance(target, LocalArtifact):
        return None
    try:
        record = load_record(Path(target.path))
    except RecordError:
        return None
    digest = hashlib.sha256("".join(f"{f.path}:{f.sha256}\n" for f in record.files).encode()).hexdigest()
    return Weights(
        source=record.source,
        sha256=digest,
        provider=record.provider,
        quantization=record.quantization or "unknown",
        bytes=record.total_bytes,
        origin=target.origin,
    )


def _first_line(exc: BaseException) -> str:
    lines = str(exc).strip().splitlines()
    return f"{type(exc).__name__}: {lines[0]}" if lines else type(exc).__name__


def _say_which_variant(model: PreparedModel, provider: Provider) -> None:
    """Log it when a catalogue model is served from another provider's variant than this worker's."""
    name, prepared = model.name, model.artifact
    if prepared.record.provider != provider and name in catalogue_names() and get_entry(name).variant(provider):
        log.info(
            "%s has no %s variant prepared here; serving its %s one (%s) (`nrt models prepare %s --provider %s`)",
            name,
            provider,
            prepared.record.provider,
            prepared.record.quantization,
            name,
            provider,
        )


def remote_endpoint(source: Endpoint, spec: ModelSpec | None, hub_url: str = HF_INFERENCE_URL) -> RemoteEndpoint:
    """The endpoint a remote source names, with what its manifest entry adds (``hub_url``: where an
    ``hf://`` model at tier remote is served when its entry names no ``base_url``)."""
    key_env = spec.api_key_env if spec is not None else None
    if isinstance(source, HubEndpoint):
        return RemoteEndpoint(
            base_url=(spec.base_url if spec is not None and spec.base_url else hub_url.rstrip("/")),
            model=source.repo,
            api_key_env=key_env or HF_TOKEN_ENV,
        )
    if isinstance(source, AnthropicSource):
        return RemoteEndpoint(
            base_url=(spec.base_url if spec is not None and spec.base_url else ANTHROPIC_BASE_URL),
            model=source.model,
            api_key_env=key_env or ANTHROPIC_KEY_ENV,
            protocol="anthropic",
        )
    model = spec.remote_model if spec is not None and spec.remote_model else "default"
    return RemoteEndpoint(base_url=source.base_url, model=model, api_key_env=key_env)
