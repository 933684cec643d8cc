"""The entry model's confidence floor, as ``nrt manifest check`` shows it.

A manifest's ``confidence_threshold`` is shown as set. Without one, an encoder router that
is already prepared on this machine is loaded and calibrated here exactly as a worker
calibrates it when it loads its examples (``nrt.hosting.embeddings.calibration``); otherwise the line
says that it calibrates at load. Nothing is built or downloaded.
"""

from __future__ import annotations

from pathlib import Path

from nrt.adapters.catalogue import CatalogueSource, LocalSource, SourceError, find_prepared, get_entry, resolve_source
from nrt.adapters.inference.artifact import MODEL_FILE, read_record
from nrt.core.manifest import Manifest
from nrt.core.routing import examples_digest, likelihood_calibration, router_examples, threshold_in_force
from nrt.hosting.embeddings.calibration import calibratable, calibrate
from nrt.hosting.embeddings.index import build_index


def threshold_line(manifest: Manifest) -> str:
    """E.g. "0.38, calibrated from 80 examples (leave-one-out: own intent 0.62, other intents 0.33)"."""
    entry = manifest.model(manifest.routing.entry)
    if entry.confidence_threshold is not None:
        return threshold_in_force(manifest, None).describe()
    intents = router_examples(manifest)
    digest = examples_digest(intents)
    count = sum(len(texts) for _, texts in intents)
    kind, artifact, why = _router_model(entry.source)
    if kind == "causal-lm":
        return threshold_in_force(manifest, likelihood_calibration(digest)).describe()
    if kind is None:
        return f"set by the router model when it loads ({why})"
    if not calibratable([len(texts) for _, texts in intents]):
        return "none: calibrating needs two intents and one with two examples, so every best label routes"
    if artifact is None:
        return f"calibrated from {count} examples when the router loads them ({why})"
    from nrt.adapters.inference import Encoder  # onnxruntime: only when there is a model to run

    encoder = Encoder.load(artifact)
    index = build_index({label: encoder.embed(list(texts)) for label, texts in intents})
    calibration = calibrate(index, digest=digest)
    if calibration is None:  # pragma: no cover - calibratable() said it can
        raise AssertionError("calibrate() found nothing to compare")
    shown = threshold_in_force(manifest, calibration).describe()
    return f"{shown} (leave-one-out: own intent {calibration.own:.2f}, other intents {calibration.other:.2f})"


def _router_model(source: str) -> tuple[str | None, Path | None, str]:
    """The router model's kind (encoder | causal-lm | None: unknown), its prepared directory, and why not."""
    try:
        resolved = resolve_source(source)
    except SourceError:
        return None, None, "its source cannot be resolved here"
    if isinstance(resolved, CatalogueSource):
        prepared = find_prepared(resolved.name)
        if prepared is None:
            return get_entry(resolved.name).kind, None, f"not prepared here: nrt models prepare {resolved.name}"
        return prepared.record.kind, prepared.directory, ""
    if isinstance(resolved, LocalSource):
        directory = Path(resolved.path).expanduser()
        if not (directory / MODEL_FILE).is_file():
            return None, None, f"no {MODEL_FILE} in {directory}"
        return read_record(directory).kind, directory, ""
    return None, None, "served remotely"
