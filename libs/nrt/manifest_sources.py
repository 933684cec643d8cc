"""What the manifest needs from the model catalogue: footprints and source warnings.

The catalogue brings its builders and ONNX Runtime with it, so it is imported on the first
lookup, not with this module: the gateway and cluster_state import this module and stay light
until a manifest actually needs a footprint.
"""

from __future__ import annotations

from pathlib import Path

from nrt.manifest import Manifest


def footprint_of(source: str) -> int | None:
    """Bytes a model from ``source`` needs: the prepared artifact's size, else the catalogue's
    estimate, else the ONNX file of a local directory; None when unknown (remote, unresolvable)."""
    from nrt.catalogue import CatalogueSource, LocalSource, SourceError, find_prepared, get_entry, resolve_source
    from nrt.inference.artifact import MODEL_FILE

    try:
        resolved = resolve_source(source)
    except SourceError:
        return None
    if isinstance(resolved, CatalogueSource):
        prepared = find_prepared(resolved.name)
        return prepared.record.total_bytes if prepared is not None else get_entry(resolved.name).approx_bytes
    if isinstance(resolved, LocalSource):
        model = Path(resolved.path).expanduser() / MODEL_FILE
        return model.stat().st_size if model.is_file() else None
    return None


def source_warnings(manifest: Manifest) -> list[str]:
    """One line per model whose source cannot be served offline, saying how to fix it."""
    from nrt.catalogue import SourceError, resolve_source

    warnings = []
    for spec in manifest.models:
        try:
            resolve_source(spec.source)
        except SourceError as exc:
            warnings.append(f"{spec.id}: {exc}")
    return warnings
