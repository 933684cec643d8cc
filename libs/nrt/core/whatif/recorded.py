"""The recorded routed requests a what-if replays: their texts and what the router decided then.

A request is replayable when the log holds its ``RequestAdmitted`` with a ``prompt`` (the manifest
in force said ``audit: {record_prompts: true}``) and its ``RequestRouted``. Each keeps the identity
of the router that decided it (``router_identity``), so that a candidate with the same router
reuses that decision instead of running the router model again: the classification is deterministic.
"""

from __future__ import annotations

import hashlib
import json
from collections.abc import Iterable
from datetime import datetime

import msgspec

from nrt.core.events import Event, ManifestApplied, RequestAdmitted, RequestRouted
from nrt.core.manifest import Manifest, ManifestError, parse_manifest


class RecordedRequest(msgspec.Struct, frozen=True, kw_only=True):
    request_id: str
    at: datetime  # when it was routed
    manifest_version: int
    prompt: str  # the text the router classified
    intent: str | None  # what the router decided (None: no intent was confident enough)
    target: str  # the model it went to
    router: str  # the identity of the router that decided (``router_identity``; "" when unknown)
    constrained: str | None = None  # how its answer was constrained (json_schema, json_object, tools; None: free)


def router_identity(manifest: Manifest) -> str:
    """What decides a request's intent: the entry model, its prompt, its labels and examples, its floor.

    Two manifests with the same identity classify every text the same way (the dispatch rule aside)."""
    entry = manifest.model(manifest.routing.entry)
    facts = {
        "source": entry.source,
        "template": entry.template,
        "labels": list(manifest.intent_labels),
        "intents": [[label, list(examples)] for label, examples in entry.intents],
        "threshold": entry.confidence_threshold,
    }
    return hashlib.sha256(json.dumps(facts, sort_keys=True).encode()).hexdigest()


def _identity(text: str) -> str:
    try:
        return router_identity(parse_manifest(text, budgets=False))
    except ManifestError:  # a manifest this version no longer reads: its requests are classified again
        return ""


def recorded_requests(events: Iterable[Event], since: datetime | None = None) -> list[RecordedRequest]:
    """The replayable requests among ``events`` (in log order) routed at or after ``since``, oldest first."""
    routers: dict[int, str] = {}
    prompts: dict[str, RequestAdmitted] = {}
    out: list[RecordedRequest] = []
    for event in events:
        if isinstance(event, ManifestApplied):
            routers[event.version] = _identity(event.text)
        elif isinstance(event, RequestAdmitted) and event.prompt is not None:
            prompts[event.request_id] = event
        elif isinstance(event, RequestRouted):
            admitted = prompts.pop(event.request_id, None)
            if admitted is None or admitted.prompt is None or (since is not None and event.occurred_at < since):
                continue
            out.append(
                RecordedRequest(
                    request_id=event.request_id,
                    at=event.occurred_at,
                    manifest_version=event.manifest_version,
                    prompt=admitted.prompt,
                    intent=event.intent,
                    target=event.target,
                    router=routers.get(event.manifest_version, ""),
                    constrained=admitted.constrained,
                )
            )
    out.sort(key=lambda r: r.at)
    return out
