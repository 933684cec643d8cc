"""A manifest's router run offline, in this process: the what-if classifier (``nrt replay --what-if``).

The same code the entry model's worker runs (``classify``: the encoder's example index and its
calibrated floor, or a causal model's label likelihoods), then the same decision (``choose_route``:
the threshold and the dispatch rule), on a session of its own; no traffic to a live stack.
"""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path

from nrt.adapters.inference import CausalLM, Encoder
from nrt.adapters.inference.artifact import read_record
from nrt.adapters.inference.weights import build_session, load_weights
from nrt.core.manifest import Manifest
from nrt.core.protocol import ClassifyReply
from nrt.core.routing import Decision, choose_route, classify_request, restrict
from nrt.hosting import classify
from nrt.hosting.model_sources import LocalArtifact, resolve

OFFLINE_WORKER = "what-if"


def offline_router(manifest: Manifest) -> Callable[[str], Decision]:
    """Load ``manifest``'s entry model and return its decision for a text. Raises RemoteError
    when its source cannot be served here (unresolvable, not prepared), ValueError when it is remote."""
    spec = manifest.model(manifest.routing.entry)
    target = resolve(spec.source, spec)
    if not isinstance(target, LocalArtifact):
        raise ValueError(f"the entry model '{spec.id}' is served remotely ({spec.source}); a what-if runs it locally")
    path = Path(target.path)
    session = build_session(load_weights(path))
    routers = classify.RouterIndexes()
    runtime: Encoder | CausalLM
    runtime = Encoder(session, path) if read_record(path).kind == "encoder" else CausalLM(session, path)

    def decision(text: str) -> Decision:
        ask = classify_request(manifest, "what-if", text)
        scored, calibration = classify.classify_with(runtime, routers, ask, spec.template)
        assert scored.best is not None  # the manifest declares at least one label
        reply = ClassifyReply(
            model_id=spec.id,
            worker_id=OFFLINE_WORKER,
            scores=scored.scores,
            best=scored.best,
            confidence=scored.confidence,
            latency_ms=0.0,
            calibration=calibration,
        )
        return choose_route(manifest, restrict(reply, manifest.intent_labels), calibration)

    return decision
