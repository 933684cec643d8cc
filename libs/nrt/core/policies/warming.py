"""Co-activation warming: when a model fires, warm the standby models that wait on it.

Every standby model whose ``co_activation`` names the model that fired is promoted
(``reason="co_activation"``); so is the dispatch target of the router's intent when its
``promotion_hint`` is ``on_router_classification`` (``reason="promotion_hint"``). A model
with a tier change in flight is skipped, so a burst of router hits sends one promotion.
"""

from __future__ import annotations

from datetime import datetime

from nrt.core.events import RequestRouted, RouterFired
from nrt.core.manifest import Manifest, Tier
from nrt.core.policies.bookkeeping import note_sent
from nrt.core.policies.eviction import make_resident
from nrt.core.policies.model import Command, ControlState
from nrt.core.policies.placement import where
from nrt.core.vocabulary import Reason

Fired = RequestRouted | RouterFired  # the entry model classified a request (RouterFired: older logs)


def warm_targets(manifest: Manifest, fired: Fired) -> list[tuple[str, Reason]]:
    """(model id, reason) of every model this firing should warm, in manifest order, without repeats."""
    targets: dict[str, Reason] = {}
    for spec in manifest.models:
        if spec.co_activation == fired.model_id and spec.id != fired.model_id:
            targets.setdefault(spec.id, Reason.CO_ACTIVATION)
    if fired.intent is not None and fired.model_id == manifest.routing.entry:
        target = manifest.dispatch_target(fired.intent)
        hinted = next((s for s in manifest.models if s.id == target), None)
        if hinted is not None and hinted.promotion_hint == "on_router_classification" and hinted.id != fired.model_id:
            targets.setdefault(hinted.id, Reason.PROMOTION_HINT)
    return list(targets.items())


def co_activate(state: ControlState, manifest: Manifest, fired: Fired, now: datetime) -> list[Command]:
    if (now - fired.occurred_at).total_seconds() > state.tuning.stale_s:
        return []  # an old event (a backlog replayed after a restart) warms nothing
    commands: list[Command] = []
    for model_id, reason in warm_targets(manifest, fired):
        if manifest.model(model_id).tier is Tier.REMOTE:
            continue
        worker_id = where(state, model_id)
        if worker_id is None or state.tier_of(model_id, worker_id) != Tier.STANDBY:
            continue  # not placed yet, or already resident
        planned = make_resident(state, manifest, model_id, reason, now)
        state = note_sent(state, planned, now)  # the next target sees this one's budget and pending
        commands.extend(planned)
    return commands
