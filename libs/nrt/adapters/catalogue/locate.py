"""Where a manifest ``source`` is on this machine, or why it cannot be used here; no weights are read.

The one answer a worker loads from (``nrt.hosting.model_sources``) and ``nrt manifest check``
checks with (``nrt.adapters.manifest_sources.unusable_sources``):

* a remote source (``http(s)://.../v1``, ``anthropic://<model>``): its endpoint, nothing to find here;
* a catalogue model: its prepared artifact, the variant for ``provider`` when built, else its root
  one; :class:`NotPrepared` when neither is (``nrt models prepare`` fixes that);
* a local directory: the variant for ``provider`` when built, else the directory itself;
  :class:`NotAnExport` when it holds no ONNX export (missing, or not a directory);
* anything else: the :class:`SourceError` of :func:`nrt.adapters.catalogue.resolve_source` (an ``hf://``
  source, an unknown catalogue name, a URL that is not an API root).
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

from nrt.adapters.catalogue.artifacts import PreparedArtifact, find_serving
from nrt.adapters.catalogue.record import Provider
from nrt.adapters.catalogue.sources import AnthropicSource, CatalogueSource, RemoteSource, SourceError, resolve_source
from nrt.adapters.catalogue.variants import serving_directory
from nrt.adapters.inference.artifact import MODEL_FILE


class NotPrepared(SourceError):
    """A catalogue model this machine has not prepared yet: usable once ``nrt models prepare`` has built it."""

    def __init__(self, name: str) -> None:
        self.name = name
        super().__init__(f"catalogue model '{name}' is not prepared on this machine; run `nrt models prepare {name}`")


class NotAnExport(SourceError):
    """A local source whose directory holds no ONNX export."""


@dataclass(frozen=True)
class PreparedModel:
    """A catalogue model's prepared artifact, the variant that serves it here."""

    name: str
    artifact: PreparedArtifact


@dataclass(frozen=True)
class LocatedArtifact:
    directory: Path  # the directory to load, absolute
    catalogue: PreparedModel | None = None  # None for a local directory


def locate(source: str, provider: Provider) -> LocatedArtifact | RemoteSource | AnthropicSource:
    """Where ``source`` is for sessions on ``provider``; a :class:`SourceError` (or one of its kinds
    above) saying why it cannot be used here."""
    resolved = resolve_source(source)
    if isinstance(resolved, RemoteSource | AnthropicSource):
        return resolved
    if isinstance(resolved, CatalogueSource):
        prepared = find_serving(resolved.name, provider)
        if prepared is None:
            raise NotPrepared(resolved.name)
        return LocatedArtifact(prepared.directory.resolve(), PreparedModel(resolved.name, prepared))
    path = Path(resolved.path).expanduser()
    if not (path / MODEL_FILE).is_file():
        raise NotAnExport(f"source {source!r} is not an ONNX export directory (no {MODEL_FILE} in {path})")
    return LocatedArtifact(serving_directory(path, provider).resolve())
