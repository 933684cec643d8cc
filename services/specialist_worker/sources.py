"""Manifest ``source`` strings to what the worker loads: a prepared artifact directory or a remote endpoint.

Parsing and its error messages are the catalogue's (``nrt.catalogue.resolve_source``);
this module adds what a worker needs: the artifact must already be prepared here.
"""

from __future__ import annotations

from pathlib import Path

import msgspec

from nrt.bus.errors import BadRequest, Unavailable
from nrt.catalogue import CatalogueSource, RemoteSource, SourceError, find_prepared, resolve_source
from nrt.inference.artifact import MODEL_FILE


class LocalArtifact(msgspec.Struct, frozen=True):
    path: str


class RemoteEndpoint(msgspec.Struct, frozen=True, kw_only=True):
    base_url: str  # an OpenAI-compatible API root, e.g. https://host/v1
    model: str
    api_key_env: str | None = None


def resolve(
    source: str, remote_model: str | None = None, api_key_env: str | None = None
) -> LocalArtifact | RemoteEndpoint:
    """Where ``source`` lives on this worker; a clear error when it cannot be served here."""
    try:
        resolved = resolve_source(source)
    except SourceError as exc:
        raise BadRequest(str(exc), code="unresolvable_source") from exc
    if isinstance(resolved, RemoteSource):
        return RemoteEndpoint(base_url=resolved.base_url, model=remote_model or "default", api_key_env=api_key_env)
    if isinstance(resolved, CatalogueSource):
        prepared = find_prepared(resolved.name)
        if prepared is None:
            raise Unavailable(
                f"catalogue model '{resolved.name}' is not prepared on this worker; "
                f"run `nrt models prepare {resolved.name}`",
                code="model_not_prepared",
            )
        return LocalArtifact(str(prepared.directory.resolve()))
    path = Path(resolved.path).expanduser()
    if not (path / MODEL_FILE).is_file():
        raise BadRequest(f"source {source!r} is not an ONNX export directory (no {MODEL_FILE} in {path})")
    return LocalArtifact(str(path.resolve()))
