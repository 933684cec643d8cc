"""Taking up the events stream from cluster_state's fold: what a follower starts from when the stream no
longer holds its beginning.

The stream keeps only the recent part of the log (``NRT_EVENTS_STREAM_MAX_MSGS`` / ``..._MAX_AGE_S``);
PostgreSQL keeps all of it. A follower (the gateway, router_svc, a worker) that finds the stream's
first message past sequence 1 asks cluster_state (``nrt.state.snapshot``) for a ``StreamSnapshot``:
its folded state, the stream sequence up to which every message is in it, and the ids of the events
in it that the stream carries later (cluster_state's own decisions, appended to the log before they
are published). The follower continues from the next sequence and skips those ids, so it folds every
event once: what it holds is what cluster_state holds, and what a fold of the stream from its start
would hold.

A follower of the control-plane events only keeps the parts of the state those events shape
(``control_plane``), as a fold of those events alone does.
"""

from __future__ import annotations

from collections.abc import Collection

import msgspec
from msgspec.structs import replace

from nrt.core.events import CONTROL_PLANE, EVENT_TYPES, SESSION_EVENTS, Event
from nrt.core.state.model import ClusterState, Counters, KeyUsage, ModelState


class StreamSnapshotQuery(msgspec.Struct, frozen=True, kw_only=True):
    """Ask cluster_state (``nrt.state.snapshot``) for its fold as a follower of the stream takes it up."""


class StreamSnapshot(msgspec.Struct, frozen=True, kw_only=True):
    """cluster_state's folded state, placed on the events stream."""

    state: ClusterState  # the fold of the log up to ``position``
    position: int
    sequence: int  # every stream message up to this sequence is in ``state``: follow from the next one
    ahead: tuple[str, ...] = ()  # ids of events in ``state`` that the stream carries after ``sequence``: skip them


CONTROL_PLANE_NAMES = frozenset(t.__name__ for t in CONTROL_PLANE)
SESSION_NAMES = frozenset(t.__name__ for t in SESSION_EVENTS)
EVERY_TYPE = frozenset(t.__name__ for t in EVENT_TYPES)


def control_plane(state: ClusterState) -> ClusterState:
    """The parts of ``state`` that the control-plane events (``nrt.core.events.CONTROL_PLANE``) shape: what a fold
    of those events alone holds. The manifest, drains, workers, placements and tiers, promotions and cold
    starts, the routers' floors and the API keys stay; sessions, requests in flight, intents, request and
    token counts, each model's use and each key's usage go, and so does a model that only requests named.
    ``events_applied`` and ``last_event_at`` stay as they are: how far into the log ``state`` is."""
    models = {}
    for model_id, model in state.models.items():
        kept = replace(model, last_used_at=None, requests=0)
        if kept != ModelState(model_id=model_id):
            models[model_id] = kept
    counters = state.counters
    return replace(
        state,
        models=models,
        sessions={},
        in_flight={},
        intents={},
        api_keys={key_id: replace(key, usage=KeyUsage()) for key_id, key in state.api_keys.items()},
        counters=Counters(
            tier_changes=counters.tier_changes,
            cold_starts=counters.cold_starts,
            manifests_applied=counters.manifests_applied,
            drains=counters.drains,
        ),
    )


def control_plane_and_sessions(state: ClusterState) -> ClusterState:
    """``control_plane(state)`` with the sessions (and the KV evictions counted): what a fold of the
    control-plane and session events (``SESSION_EVENTS``) holds, router_svc's view."""
    view = control_plane(state)
    counters = replace(view.counters, kv_evictions=state.counters.kv_evictions)
    return replace(view, sessions=state.sessions, counters=counters)


def narrow(state: ClusterState, types: Collection[type[Event]]) -> ClusterState:
    """``state`` as a follower of ``types`` holds it (none: every type): the whole of it, or its control plane
    for a follower of control-plane events (some of them: the control plane all the same), with the sessions
    for a follower of every session event too. ValueError for any other selection: a snapshot cannot say what a fold of only those events would hold."""
    names = {t.__name__ for t in types}
    if not names or names >= EVERY_TYPE:
        return state
    if names <= CONTROL_PLANE_NAMES:
        return control_plane(state)
    if names <= CONTROL_PLANE_NAMES | SESSION_NAMES and names >= SESSION_NAMES:
        return control_plane_and_sessions(state)
    raise ValueError(
        f"a follower of {', '.join(sorted(names))} cannot start from a snapshot: follow every event type, "
        "control-plane types only, or those and every session type"
    )


def followable(types: Collection[type[Event]]) -> None:
    """ValueError unless a follower of ``types`` can start from a snapshot (``narrow``)."""
    narrow(ClusterState(), types)
