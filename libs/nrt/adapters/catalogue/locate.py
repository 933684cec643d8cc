"""Where a manifest ``source`` is on this machine, or why it cannot be used here; no weights are read.

The one answer a worker loads from (``nrt.hosting.model_sources``) and ``nrt manifest check``
checks with (``nrt.adapters.manifest_sources.unusable_sources``):

* a remote source (``http(s)://.../v1``, ``anthropic://<model>``, or an ``hf://`` model declared at
  ``tier: remote``: :class:`HubEndpoint`): its endpoint, nothing to find here;
* a catalogue model: its prepared artifact, the variant for ``provider`` when built, else its root
  one; :class:`NotPrepared` when neither is (``nrt models prepare`` fixes that);
* a local directory: the variant for ``provider`` when built, else the directory itself;
  :class:`NotAnExport` when it holds no ONNX export (missing, or not a directory);
* an operator's checkpoint (``hf://org/name[@revision]``, a local Hugging Face checkpoint
  directory, or a local GGUF file: ``nrt.adapters.catalogue.gguf_source``): its prepared artifact
  (``nrt.adapters.catalogue.checkpoints``);
  :class:`CheckpointNotPrepared` when it is not prepared yet (a worker prepares it when it loads it),
  :class:`NotFetched` when the Hugging Face cache does not hold it yet and ``fetch`` is off;
* anything else: the :class:`SourceError` of :func:`nrt.adapters.catalogue.resolve_source` (an unknown
  scheme or catalogue name, a URL that is not an API root), or of the Hub (a gated or missing
  repository, an unknown revision, a checkpoint of an unsupported architecture).
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

from nrt.adapters.catalogue.artifacts import PreparedArtifact, find_prepared, find_serving
from nrt.adapters.catalogue.checkpoints import (
    Checkpoint,
    CpuFormat,
    checkpoint_entry,
    cpu_format,
    hub_checkpoint,
    is_checkpoint,
    local_checkpoint,
)
from nrt.adapters.catalogue.gguf_source import gguf_checkpoint
from nrt.adapters.catalogue.hub import cached, checkout, not_cached_problem, offline_mode
from nrt.adapters.catalogue.record import Provider
from nrt.adapters.catalogue.sources import (
    AnthropicSource,
    CatalogueSource,
    GgufSource,
    HfSource,
    HubEndpoint,
    LocalSource,
    RemoteSource,
    SourceError,
    resolve_source,
    served_remotely,
)
from nrt.adapters.catalogue.variants import serving_directory
from nrt.adapters.inference.artifact import MODEL_FILE
from nrt.adapters.inference.errors import ArtifactError
from nrt.core.vocabulary import WeightFormat


class NotPrepared(SourceError):
    """A catalogue model this machine has not prepared yet: usable once ``nrt models prepare`` has built it."""

    def __init__(self, name: str) -> None:
        self.name = name
        super().__init__(f"catalogue model '{name}' is not prepared on this machine; run `nrt models prepare {name}`")


class NotAnExport(SourceError):
    """A local source whose directory holds no ONNX export."""


class CheckpointNotPrepared(NotPrepared):
    """An operator's checkpoint this machine has not prepared yet: a worker prepares it when it loads it."""

    def __init__(self, checkpoint: Checkpoint) -> None:
        self.checkpoint = checkpoint
        SourceError.__init__(
            self,
            f"{checkpoint.provenance} ({checkpoint.model_type}) is not prepared on this machine yet: a worker "
            f"prepares it when it loads it, or run `nrt models add {_added_as(checkpoint.provenance)}`",
        )
        self.name = checkpoint.name


def _added_as(provenance: str) -> str:
    """What ``nrt models add`` takes for ``provenance``: the hf:// source, or the local path."""
    return provenance.split("#")[0].removeprefix("local:").removeprefix("gguf:")


class NotFetched(NotPrepared):
    """An ``hf://`` source the Hugging Face cache does not hold yet: a worker downloads it when it loads it."""

    def __init__(self, source: HfSource) -> None:
        self.source = source
        SourceError.__init__(self, f"source {source}: not in the Hugging Face cache yet; a worker downloads it")
        self.name = str(source)


@dataclass(frozen=True)
class PreparedModel:
    """A catalogue model's prepared artifact, the variant that serves it here."""

    name: str
    artifact: PreparedArtifact


@dataclass(frozen=True)
class LocatedArtifact:
    directory: Path  # the directory to load, absolute
    catalogue: PreparedModel | None = None  # None for a local directory


Endpoint = RemoteSource | AnthropicSource | HubEndpoint  # what a model at tier remote is served by


def locate(
    source: str,
    provider: Provider,
    *,
    fetch: bool = False,
    weights: WeightFormat | None = None,
    remote: bool = False,
) -> LocatedArtifact | Endpoint:
    """Where ``source`` is for sessions on ``provider``; a :class:`SourceError` (or one of its kinds
    above) saying why it cannot be used here. ``fetch``: download an ``hf://`` source into the Hugging
    Face cache when it is not there (a worker about to load it); without it only the cache is read.
    ``weights``: the manifest's ``quantization`` of an operator's checkpoint (fp16: its cuda variant,
    on any provider); other sources come as they were built, and asking for a format is an error.
    ``remote``: the model is declared at ``tier: remote``, served by the endpoint its source names."""
    resolved = resolve_source(source)
    if remote:
        return served_remotely(resolved, source)
    fmt = cpu_format(weights)
    if weights is WeightFormat.FP16:
        provider = "cuda"
    exact = weights is not None  # the format asked for, not another provider's as a stand-in
    if isinstance(resolved, HfSource):
        return _prepared(_hub(resolved, fetch, fmt), provider, exact)
    if isinstance(resolved, GgufSource):
        gguf = Path(resolved.path)
        return _prepared(_readable(lambda: gguf_checkpoint(gguf, fmt)), provider, exact)
    if weights is not None and not (isinstance(resolved, LocalSource) and _is_checkpoint_dir(resolved)):
        raise SourceError(
            f"source {source!r}: 'quantization: {weights}' applies to an operator's checkpoint (hf://org/name, or a "
            f"Hugging Face checkpoint directory); this source is served as it was built: remove it"
        )
    if isinstance(resolved, RemoteSource | AnthropicSource):
        return resolved
    if isinstance(resolved, CatalogueSource):
        prepared = find_serving(resolved.name, provider)
        if prepared is None:
            raise NotPrepared(resolved.name)
        return LocatedArtifact(prepared.directory.resolve(), PreparedModel(resolved.name, prepared))
    path = Path(resolved.path).expanduser()
    if _is_checkpoint_dir(resolved):
        return _prepared(_readable(lambda: local_checkpoint(path, fmt)), provider, exact)
    if not (path / MODEL_FILE).is_file():
        raise NotAnExport(
            f"source {source!r} is neither an ONNX export directory (no {MODEL_FILE} in {path}) nor a Hugging Face "
            f"checkpoint (config.json and *.safetensors)"
        )
    return LocatedArtifact(serving_directory(path, provider).resolve())


def _is_checkpoint_dir(source: LocalSource) -> bool:
    path = Path(source.path).expanduser()
    return not (path / MODEL_FILE).is_file() and path.is_dir() and is_checkpoint(path)


def _hub(source: HfSource, fetch: bool, fmt: CpuFormat) -> Checkpoint:
    if fetch:
        found = checkout(source)
    else:
        cached_checkout = cached(source)
        if cached_checkout is None:
            if offline_mode():
                raise SourceError(not_cached_problem(source))
            raise NotFetched(source)
        found = cached_checkout
    return _readable(lambda: hub_checkpoint(found, fmt))


def _readable(read: Callable[[], Checkpoint]) -> Checkpoint:
    """The checkpoint ``read`` returns; its ``ArtifactError`` (an unsupported architecture, no tokenizer) as
    a ``SourceError``, the error of a source that cannot be used."""
    try:
        return read()
    except ArtifactError as exc:
        raise SourceError(str(exc)) from exc


def _prepared(checkpoint: Checkpoint, provider: Provider, exact: bool) -> LocatedArtifact:
    entry = checkpoint_entry(checkpoint)
    prepared = (
        find_prepared(checkpoint.name, provider=entry.serving(provider).provider, entry=entry)
        if exact
        else find_serving(checkpoint.name, provider, entry=entry)
    )
    if prepared is None:
        raise CheckpointNotPrepared(checkpoint)
    return LocatedArtifact(prepared.directory.resolve(), PreparedModel(checkpoint.name, prepared))
