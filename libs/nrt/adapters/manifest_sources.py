"""What the manifest needs from the model catalogue: footprints, sources this machine cannot use, warnings.

The catalogue brings its builders and ONNX Runtime with it, so it is imported on the first
lookup, not with this module: the gateway and cluster_state import this module and stay light
until a manifest actually needs a footprint.
"""

from __future__ import annotations

from pathlib import Path
from typing import Literal

from nrt.core.manifest import Manifest, Problem
from nrt.core.manifest.parse import model_key_paths
from nrt.core.manifest.yamltree import parse_yaml, render_path


def footprint_of(source: str) -> int | None:
    """Bytes a model from ``source`` needs: the prepared artifact's size, else the catalogue's
    estimate, else the ONNX file of a local directory; None when unknown (remote, unresolvable)."""
    from nrt.adapters.catalogue import (
        CatalogueSource,
        LocalSource,
        SourceError,
        find_prepared,
        get_entry,
        resolve_source,
    )
    from nrt.adapters.inference.artifact import MODEL_FILE

    try:
        resolved = resolve_source(source)
    except SourceError:
        return None
    if isinstance(resolved, CatalogueSource):
        prepared = find_prepared(resolved.name)
        return prepared.record.total_bytes if prepared is not None else get_entry(resolved.name).approx_bytes
    if isinstance(resolved, LocalSource) and (Path(resolved.path).expanduser() / MODEL_FILE).is_file():
        return (Path(resolved.path).expanduser() / MODEL_FILE).stat().st_size
    return _checkpoint_footprint(source)


def _checkpoint_footprint(source: str) -> int | None:
    """An operator's checkpoint: its prepared artifact's bytes, else its recipe's estimate from the
    weights in the Hugging Face cache; None when it is not there yet (or not a checkpoint)."""
    from nrt.adapters.catalogue import LocatedArtifact, SourceError, host_provider, locate
    from nrt.adapters.catalogue.checkpoints import checkpoint_entry
    from nrt.adapters.catalogue.locate import CheckpointNotPrepared

    provider = host_provider()
    try:
        located = locate(source, provider)
    except CheckpointNotPrepared as missing:
        return checkpoint_entry(missing.checkpoint).serving(provider).approx_bytes
    except SourceError:
        return None
    if isinstance(located, LocatedArtifact) and located.catalogue is not None:
        return located.catalogue.artifact.record.total_bytes
    return None


def pending_sources(manifest: Manifest) -> list[str]:
    """One line per model a worker here must fetch from the Hub or prepare before it serves it."""
    return check_sources(manifest)[1]


def source_warnings(manifest: Manifest) -> list[str]:
    """One line per model whose source cannot be served offline, saying how to fix it: what
    :func:`unusable_sources` finds on any machine (``nrt manifest check --no-sources`` warns of it)."""
    from nrt.adapters.catalogue import SourceError, resolve_source

    warnings = []
    for spec in manifest.models:
        try:
            resolve_source(spec.source)
        except SourceError as exc:
            warnings.append(f"{spec.id}: {exc}")
    return warnings


def unusable_sources(manifest: Manifest) -> list[Problem]:
    """Each model whose source a worker on this machine could not use, as a problem at its ``source``
    line: an ``hf://`` source the Hub will not give (offline and not cached, gated, missing, an
    unsupported architecture), an unknown catalogue model, a local directory that is neither an ONNX
    export nor a checkpoint. A model not prepared (or not downloaded) yet is usable: ``nrt up``
    prepares catalogue models, a worker fetches and prepares a checkpoint (:func:`pending_sources`
    lists them). Resolved as a worker resolves it (:func:`nrt.adapters.catalogue.locate`), without
    downloading or reading weights."""
    return check_sources(manifest)[0]


def check_sources(manifest: Manifest) -> tuple[list[Problem], list[str]]:
    """One resolution of every model's source: the problems of :func:`unusable_sources` and the lines
    of :func:`pending_sources` (``nrt manifest check`` shows both)."""
    from nrt.adapters.catalogue import NotPrepared, SourceError, host_provider, locate
    from nrt.core.manifest import Tier

    provider = host_provider()
    lines = parse_yaml(manifest.text)
    problems: list[Problem] = []
    pending: list[str] = []
    for spec, path in zip(manifest.models, model_key_paths(manifest.models), strict=True):
        try:
            locate(spec.source, provider, weights=spec.quantization, remote=spec.tier is Tier.REMOTE)
        except NotPrepared as exc:
            pending.append(f"{spec.id}: {exc}")
        except SourceError as exc:
            key = (*path, "source")
            problems.append(Problem(render_path(key), str(exc), lines.line(key)))
    return problems, pending


def kind_of(source: str, remote: bool = False) -> Literal["causal-lm", "encoder"] | None:
    """What a model from ``source`` is: an ``encoder`` (it embeds) or a ``causal-lm`` (it generates, as every
    ``remote`` model does); None when this machine cannot tell (a source not prepared or not resolvable here)."""
    from nrt.adapters.catalogue import CatalogueSource, LocatedArtifact, SourceError, get_entry, host_provider, locate
    from nrt.adapters.catalogue.locate import CheckpointNotPrepared
    from nrt.adapters.catalogue.sources import resolve_source
    from nrt.adapters.inference.artifact import read_record
    from nrt.adapters.inference.errors import ArtifactError

    if remote:
        return "causal-lm"
    try:
        resolved = resolve_source(source)
        if isinstance(resolved, CatalogueSource):
            return get_entry(resolved.name).kind
        located = locate(source, host_provider())
    except CheckpointNotPrepared as missing:
        return missing.checkpoint.kind
    except (SourceError, KeyError, ArtifactError):
        return None
    if not isinstance(located, LocatedArtifact):
        return "causal-lm"  # an OpenAI-compatible or Anthropic endpoint
    try:
        return read_record(located.directory).kind
    except ArtifactError:
        return None
