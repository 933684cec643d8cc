"""Where a conversation's next turn goes: to the worker holding its KV, and to the specialist it was on.

Two pure choices router_svc makes for a request that carries a session id (``X-NRT-Session``):

- :func:`stay_on_specialist`: a conversation stays on the specialist that answered its last turn
  unless the router's decision for the new turn clears ``routing.sticky_margin``: the new
  target's score must beat the previous specialist's own score by at least the margin. A turn
  with no confident intent (the fallback's) stays too: "thanks, and the other one?" belongs to the
  conversation, not to the fallback.
- :func:`choose_worker`: the turn goes to the worker that holds the session's KV (the folded
  ``SessionState``: the worker of its last ``SessionOpened``/``SessionTouched``) while that worker is
  alive and serves the model; when it is not known, or was lost, to the worker that rendezvous
  hashing of the session id over the model's serving workers picks, so every router_svc instance
  sends a session's first turns to the same worker even before the fold has its
  ``SessionTouched``, and losing a worker moves only its own sessions. A request without a
  session, or with one candidate only, goes to the model's queue group (``Target.worker_id`` None).

The folded state knows where a session's KV is once the worker's event has come back through the
stream (milliseconds after the turn): a turn sent sooner goes to the hashed worker, which is the
holder unless the worker set changed in between.
"""

from __future__ import annotations

import hashlib
from collections.abc import Iterable

import msgspec

from nrt.core.manifest import Manifest
from nrt.core.routing.decision import Decision
from nrt.core.routing.hosts import serving_workers
from nrt.core.state import ClusterState


class Target(msgspec.Struct, frozen=True, kw_only=True):
    """Where one generate request goes: a worker's own subject, or the model's queue group."""

    model_id: str
    worker_id: str | None  # None: the model's queue group (any worker serving it)
    why: str  # holder | hashed | queue: for the span and the logs


def rendezvous(session_id: str, workers: Iterable[str]) -> str | None:
    """The worker of ``workers`` with the highest hash of (session, worker): stable per session,
    and a change of the set moves only the sessions of the workers that came or went. None: no workers."""
    best: tuple[bytes, str] | None = None
    for worker_id in workers:
        weight = hashlib.blake2b(f"{session_id}\0{worker_id}".encode(), digest_size=8).digest()
        if best is None or (weight, worker_id) > best:
            best = (weight, worker_id)
    return best[1] if best is not None else None


def session_holder(state: ClusterState, session_id: str, model_id: str) -> str | None:
    """The worker the log says holds ``session_id``'s KV for ``model_id`` (None: none, or it was evicted)."""
    session = state.sessions.get(session_id)
    if session is None or session.model_id != model_id or session.kv_evicted:
        return None
    return session.worker_id


def choose_worker(state: ClusterState, model_id: str, session_id: str | None, avoid: Iterable[str] = ()) -> Target:
    """Where a turn of ``session_id`` on ``model_id`` goes (the module's rule); ``avoid``: workers the
    caller knows are gone though the fold may not say so yet (a retried request's lost worker)."""
    if session_id is None:
        return Target(model_id=model_id, worker_id=None, why="queue")
    skip = set(avoid)
    candidates = [w for w in serving_workers(state, model_id) if w not in skip]
    holder = session_holder(state, session_id, model_id)
    if holder is not None and holder in candidates:
        return Target(model_id=model_id, worker_id=holder, why="holder")
    if len(candidates) < 2:
        return Target(model_id=model_id, worker_id=None, why="queue")
    return Target(model_id=model_id, worker_id=rendezvous(session_id, candidates), why="hashed")


def previous_specialist(state: ClusterState, manifest: Manifest, session_id: str | None) -> str | None:
    """The model that answered ``session_id``'s last turn, when it is one of ``manifest``'s specialists
    and a live worker still serves it (a conversation never waits for a specialist that is gone)."""
    if session_id is None:
        return None
    session = state.sessions.get(session_id)
    if session is None:
        return None
    specialists = {spec.id for spec in manifest.specialists}
    if session.model_id not in specialists or not serving_workers(state, session.model_id):
        return None
    return session.model_id


def stay_on_specialist(manifest: Manifest, decision: Decision, previous: str | None) -> Decision:
    """``decision``, or the same decision sent to ``previous`` (the conversation's specialist) when the
    new target does not clear ``manifest.routing.sticky_margin`` over it (the module's rule).

    Only intent dispatch moves a conversation: under a fixed route every turn goes to the same
    specialist anyway. The previous specialist's score is the best score among the labels the
    dispatch rule sends to it; a previous specialist no label reaches any more (another manifest)
    does not hold the conversation."""
    rule = manifest.routing.dispatch_rule
    if previous is None or decision.target == previous or rule.fixed_target is not None:
        return decision
    labels = [label for label in manifest.intent_labels if manifest.dispatch_target(label) == previous]
    if not labels:
        return decision
    kept = max(decision.scores.get(label, 0.0) for label in labels)
    new = decision.scores.get(decision.intent, 0.0) if decision.intent is not None else kept
    margin = manifest.routing.sticky_margin
    if decision.intent is not None and new - kept >= margin:
        return msgspec.structs.replace(
            decision,
            rule=f"{decision.rule} (left {previous}: {new:.2f} clears its {kept:.2f} by the sticky margin {margin:.2f})",
        )
    why = (
        f"'{decision.intent}' {new:.2f} does not clear {previous}'s {kept:.2f} by the sticky margin {margin:.2f}"
        if decision.intent is not None
        else "no confident intent"
    )
    return msgspec.structs.replace(
        decision,
        intent=max(labels, key=lambda label: decision.scores.get(label, 0.0)),  # the previous specialist's best label
        target=previous,
        rule=f"{decision.rule}; the conversation stays on {previous} ({why})",
    )
