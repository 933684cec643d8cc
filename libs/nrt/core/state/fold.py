"""The pure fold: ``evolve(state, event) -> state``. No I/O, no clock, no mutation.

The same function runs live in cluster_state, in the gateway's local view and in
``nrt replay``; the same events therefore always give the same state.

Each handler returns the state after its event in one copy of the state: its changes, the
event counted (``events_applied``) and its time (``last_event_at``). A replay folds millions
of events, so the hot handlers name their changes inline (no helper taking keyword arguments).
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from msgspec.structs import replace

from nrt.core.events import (
    AnyEvent,
    ApiKeyCreated,
    ApiKeyRevoked,
    DrainCompleted,
    DrainStarted,
    Event,
    ManifestApplied,
    ModelPlaced,
    PrefixKvEvicted,
    PrefixKvStored,
    RequestAdmitted,
    RequestCompleted,
    RequestDispatched,
    RequestFailed,
    RequestRouted,
    RouterCalibrated,
    RouterFired,
    SessionClosed,
    SessionKvEvicted,
    SessionOpened,
    SessionTouched,
    TierChanged,
    WorkerJoined,
    WorkerLost,
)
from nrt.core.state.model import (
    ApiKey,
    ClusterState,
    Counters,
    LoadFailure,
    ModelState,
    Placement,
    PrefixState,
    SessionState,
    WorkerState,
    prefix_id,
)
from nrt.core.vocabulary import TIER_RANK, Reason, Tier

if TYPE_CHECKING:
    from collections.abc import Callable, Iterable
    from datetime import datetime

ENDED_EARLY_KEPT = 10_000  # requests whose end came before their start, remembered until it comes (oldest dropped)


def evolve(state: ClusterState, event: Event) -> ClusterState:
    """The state after ``event``; ``state`` itself is left untouched."""
    handler = _HANDLERS.get(type(event))
    if handler is None:
        return replace(state, events_applied=state.events_applied + 1, last_event_at=event.occurred_at)
    return handler(state, event)  # each handler counts the event and stamps its time: one copy of the state


def fold(events: Iterable[Event], state: ClusterState | None = None) -> ClusterState:
    """Fold ``events`` into ``state`` (an empty cluster by default)."""
    current = state if state is not None else ClusterState()
    for event in events:
        current = evolve(current, event)
    return current


def _count(counters: Counters, **increments: int) -> Counters:
    return replace(counters, **{name: getattr(counters, name) + n for name, n in increments.items()})


def _with(mapping: dict[str, Any], key: str, value: Any) -> dict[str, Any]:
    copy = dict(mapping)
    copy[key] = value
    return copy


def _without(mapping: dict[str, Any], key: str) -> dict[str, Any]:
    if key not in mapping:
        return mapping
    copy = dict(mapping)
    del copy[key]
    return copy


def _model(state: ClusterState, model_id: str) -> ModelState:
    return state.models.get(model_id) or ModelState(model_id=model_id)


# -- handlers --------------------------------------------------------------------------


def _manifest_applied(state: ClusterState, e: ManifestApplied) -> ClusterState:
    return replace(
        state,
        cluster=e.cluster,
        manifest_version=e.version,
        manifest_digest=e.digest,
        manifest_text=e.text,
        draining=False,
        drain_to_version=None,
        counters=_count(state.counters, manifests_applied=1),
        events_applied=state.events_applied + 1,
        last_event_at=e.occurred_at,
    )


def _drain_started(state: ClusterState, e: DrainStarted) -> ClusterState:
    return replace(
        state,
        draining=True,
        drain_to_version=e.to_version,
        counters=_count(state.counters, drains=1),
        events_applied=state.events_applied + 1,
        last_event_at=e.occurred_at,
    )


def _drain_completed(state: ClusterState, e: DrainCompleted) -> ClusterState:
    # A completed drain stops admission waits; the cut-over itself is the ManifestApplied that follows.
    return replace(
        state,
        draining=False,
        drain_to_version=None,
        events_applied=state.events_applied + 1,
        last_event_at=e.occurred_at,
    )


def _worker_joined(state: ClusterState, e: WorkerJoined) -> ClusterState:
    worker = WorkerState(
        worker_id=e.worker_id,
        host=e.host,
        cpu_count=e.cpu_count,
        ram_bytes=e.ram_bytes,
        accelerator_bytes=e.accelerator_bytes,
        providers=e.providers,
        joined_at=e.occurred_at,
        role=e.role,
        device=e.device,
    )
    return replace(
        state,
        workers=_with(state.workers, e.worker_id, worker),
        models=_forget_failures(state.models, e.worker_id),  # joined anew: its loads get a fresh start
        events_applied=state.events_applied + 1,
        last_event_at=e.occurred_at,
    )


def _forget_failures(models: dict[str, ModelState], worker_id: str) -> dict[str, ModelState]:
    """``models`` without the load failures recorded on ``worker_id`` (the same dict when it has none)."""
    if not any(worker_id in model.load_failures for model in models.values()):
        return models
    return {
        model_id: replace(model, load_failures=_without(model.load_failures, worker_id))
        for model_id, model in models.items()
    }


def _worker_lost(state: ClusterState, e: WorkerLost) -> ClusterState:
    worker = state.workers.get(e.worker_id)
    workers = _with(state.workers, e.worker_id, replace(worker, alive=False)) if worker else state.workers
    models = {
        model_id: replace(model, placements=_without(model.placements, e.worker_id))
        if e.worker_id in model.placements
        else model
        for model_id, model in state.models.items()
    }
    sessions = {sid: s for sid, s in state.sessions.items() if s.worker_id != e.worker_id}
    prefixes = {pid: p for pid, p in state.prefixes.items() if p.worker_id != e.worker_id}
    return replace(
        state,
        workers=workers,
        models=models,
        sessions=sessions,
        prefixes=prefixes,
        events_applied=state.events_applied + 1,
        last_event_at=e.occurred_at,
    )


def _model_placed(state: ClusterState, e: ModelPlaced) -> ClusterState:
    model = _model(state, e.model_id)
    placement = model.placements.get(e.worker_id) or Placement(
        worker_id=e.worker_id, tier=Tier.UNLOADED, since=e.occurred_at
    )
    updated = replace(model, artifact=e.artifact, placements=_with(model.placements, e.worker_id, placement))
    return replace(
        state,
        models=_with(state.models, e.model_id, updated),
        events_applied=state.events_applied + 1,
        last_event_at=e.occurred_at,
    )


def _tier_changed(state: ClusterState, e: TierChanged) -> ClusterState:
    model = _model(state, e.model_id)
    if e.to_tier == Tier.UNLOADED:
        placements = _without(model.placements, e.worker_id)
    else:
        placement = Placement(worker_id=e.worker_id, tier=e.to_tier, bytes_held=e.bytes_held, since=e.occurred_at)
        placements = _with(model.placements, e.worker_id, placement)
    moved = e.to_tier != e.from_tier  # a failed load (unloaded -> unloaded) only withdraws the placement
    failures = model.load_failures
    if e.reason == Reason.LOAD_FAILED:
        failure = LoadFailure(worker_id=e.worker_id, artifact=model.artifact, error=e.error or "", at=e.occurred_at)
        failures = _with(failures, e.worker_id, failure)
    elif e.to_tier != Tier.UNLOADED:
        failures = _without(failures, e.worker_id)  # it holds the model there now
    up = TIER_RANK[e.to_tier] > TIER_RANK[e.from_tier]
    updated = replace(
        model,
        placements=placements,
        promotions=model.promotions + (1 if up else 0),
        demotions=model.demotions + (1 if moved and not up else 0),
        cold_starts=model.cold_starts + (1 if e.cold_start else 0),
        calibrated=model.calibrated if placements else None,  # held nowhere: a reload calibrates anew
        load_failures=failures,
    )
    counters = _count(state.counters, tier_changes=1 if moved else 0, cold_starts=1 if e.cold_start else 0)
    prefixes = state.prefixes
    if e.to_tier != Tier.RESIDENT and any(_held_by(p, e.model_id, e.worker_id) for p in prefixes.values()):
        # its shared prefixes' KV went with its session (a worker records no eviction for them)
        prefixes = {pid: p for pid, p in prefixes.items() if not _held_by(p, e.model_id, e.worker_id)}
    return replace(
        state,
        models=_with(state.models, e.model_id, updated),
        prefixes=prefixes,
        counters=counters,
        events_applied=state.events_applied + 1,
        last_event_at=e.occurred_at,
    )


def _session_opened(state: ClusterState, e: SessionOpened) -> ClusterState:
    session = SessionState(
        session_id=e.session_id,
        model_id=e.model_id,
        worker_id=e.worker_id,
        opened_at=e.occurred_at,
        last_used_at=e.occurred_at,
    )
    return replace(
        state,
        sessions=_with(state.sessions, e.session_id, session),
        events_applied=state.events_applied + 1,
        last_event_at=e.occurred_at,
    )


def _session_touched(state: ClusterState, e: SessionTouched) -> ClusterState:
    session = state.sessions.get(e.session_id) or SessionState(
        session_id=e.session_id,
        model_id=e.model_id,
        worker_id=e.worker_id,
        opened_at=e.occurred_at,
        last_used_at=e.occurred_at,
    )
    updated = replace(
        session,
        model_id=e.model_id,
        worker_id=e.worker_id,
        last_used_at=e.occurred_at,
        turns=session.turns + 1,
        cached_tokens=e.cached_tokens,
        kv_bytes=e.kv_bytes,
        kv_evicted=False,
        evicted_reason=None,
    )
    return replace(
        state,
        sessions=_with(state.sessions, e.session_id, updated),
        events_applied=state.events_applied + 1,
        last_event_at=e.occurred_at,
    )


def _session_kv_evicted(state: ClusterState, e: SessionKvEvicted) -> ClusterState:
    session = state.sessions.get(e.session_id)
    counters = replace(state.counters, kv_evictions=state.counters.kv_evictions + 1)
    if session is None:
        return replace(state, counters=counters, events_applied=state.events_applied + 1, last_event_at=e.occurred_at)
    updated = replace(session, cached_tokens=0, kv_bytes=0, kv_evicted=True, evicted_reason=e.reason)
    return replace(
        state,
        sessions=_with(state.sessions, e.session_id, updated),
        counters=counters,
        events_applied=state.events_applied + 1,
        last_event_at=e.occurred_at,
    )


def _held_by(prefix: PrefixState, model_id: str, worker_id: str) -> bool:
    return prefix.model_id == model_id and prefix.worker_id == worker_id


def _prefix_kv_stored(state: ClusterState, e: PrefixKvStored) -> ClusterState:
    prefix = PrefixState(
        model_id=e.model_id,
        worker_id=e.worker_id,
        prefix_key=e.prefix_key,
        tokens=e.tokens,
        kv_bytes=e.kv_bytes,
        stored_at=e.occurred_at,
    )
    return replace(
        state,
        prefixes=_with(state.prefixes, prefix_id(e.worker_id, e.model_id, e.prefix_key), prefix),
        events_applied=state.events_applied + 1,
        last_event_at=e.occurred_at,
    )


def _prefix_kv_evicted(state: ClusterState, e: PrefixKvEvicted) -> ClusterState:
    return replace(
        state,
        prefixes=_without(state.prefixes, prefix_id(e.worker_id, e.model_id, e.prefix_key)),
        counters=_count(state.counters, kv_evictions=1),
        events_applied=state.events_applied + 1,
        last_event_at=e.occurred_at,
    )


def _session_closed(state: ClusterState, e: SessionClosed) -> ClusterState:
    return replace(
        state,
        sessions=_without(state.sessions, e.session_id),
        events_applied=state.events_applied + 1,
        last_event_at=e.occurred_at,
    )


def _request_admitted(state: ClusterState, e: RequestAdmitted) -> ClusterState:
    if e.request_id in state.ended_early:  # its end is folded already: it is not in flight
        in_flight, admitted_by = state.in_flight, state.admitted_by
    else:
        in_flight = _with(state.in_flight, e.request_id, e.manifest_version)
        admitted_by = _with(state.admitted_by, e.request_id, e.gateway_id) if e.gateway_id else state.admitted_by
    return replace(
        state,
        in_flight=in_flight,
        admitted_by=admitted_by,
        ended_early=_without(state.ended_early, e.request_id),
        counters=replace(state.counters, requests_admitted=state.counters.requests_admitted + 1),
        api_keys=_used(state.api_keys, e.key_id, e.occurred_at, requests=1),
        events_applied=state.events_applied + 1,
        last_event_at=e.occurred_at,
    )


def _classified(state: ClusterState, e: RouterFired | RequestRouted, dispatches: int = 0) -> ClusterState:
    """The entry model fired: it was used, and chose an intent (or none); ``dispatches`` counts a dispatch too."""
    label = e.intent if e.intent is not None else "<none>"
    model = _model(state, e.model_id)
    updated = replace(model, last_used_at=e.occurred_at, requests=model.requests + 1)
    counters = state.counters
    return replace(
        state,
        models=_with(state.models, e.model_id, updated),
        intents=_with(state.intents, label, state.intents.get(label, 0) + 1),
        counters=replace(counters, router_fired=counters.router_fired + 1, dispatches=counters.dispatches + dispatches),
        events_applied=state.events_applied + 1,
        last_event_at=e.occurred_at,
    )


def _router_fired(state: ClusterState, e: RouterFired) -> ClusterState:
    return _classified(state, e)


def _router_calibrated(state: ClusterState, e: RouterCalibrated) -> ClusterState:
    updated = replace(_model(state, e.model_id), calibrated=e)
    return replace(
        state,
        models=_with(state.models, e.model_id, updated),
        events_applied=state.events_applied + 1,
        last_event_at=e.occurred_at,
    )


def _request_dispatched(state: ClusterState, e: RequestDispatched) -> ClusterState:
    return replace(
        state,
        counters=replace(state.counters, dispatches=state.counters.dispatches + 1),
        events_applied=state.events_applied + 1,
        last_event_at=e.occurred_at,
    )


def _request_routed(state: ClusterState, e: RequestRouted) -> ClusterState:
    """The decision and the dispatch in one event: it folds as the two events it replaces."""
    return _classified(state, e, dispatches=1)


def _ended_early(state: ClusterState, request_id: str, at: datetime) -> dict[str, datetime]:
    """``state.ended_early`` once ``request_id`` has ended at ``at``: with it when its start is not folded yet (the
    oldest entry dropped beyond ``ENDED_EARLY_KEPT``: a start that never comes must not hold memory for good)."""
    if request_id in state.in_flight:
        return state.ended_early
    early = _with(state.ended_early, request_id, at)
    if len(early) > ENDED_EARLY_KEPT:
        del early[next(iter(early))]
    return early


def _request_completed(state: ClusterState, e: RequestCompleted) -> ClusterState:
    model = _model(state, e.model_id)
    updated = replace(model, last_used_at=e.occurred_at, requests=model.requests + 1)
    counters = state.counters
    counters = replace(
        counters,
        requests_completed=counters.requests_completed + 1,
        prompt_tokens=counters.prompt_tokens + e.prompt_tokens,
        completion_tokens=counters.completion_tokens + e.completion_tokens,
    )
    return replace(
        state,
        models=_with(state.models, e.model_id, updated),
        in_flight=_without(state.in_flight, e.request_id),
        admitted_by=_without(state.admitted_by, e.request_id),
        ended_early=_ended_early(state, e.request_id, e.occurred_at),
        counters=counters,
        api_keys=_used(
            state.api_keys,
            e.key_id,
            e.occurred_at,
            completed=1,
            prompt_tokens=e.prompt_tokens,
            completion_tokens=e.completion_tokens,
        ),
        events_applied=state.events_applied + 1,
        last_event_at=e.occurred_at,
    )


def _request_failed(state: ClusterState, e: RequestFailed) -> ClusterState:
    return replace(
        state,
        in_flight=_without(state.in_flight, e.request_id),
        admitted_by=_without(state.admitted_by, e.request_id),
        ended_early=_ended_early(state, e.request_id, e.occurred_at),
        counters=replace(state.counters, requests_failed=state.counters.requests_failed + 1),
        api_keys=_used(state.api_keys, e.key_id, e.occurred_at, failed=1),
        events_applied=state.events_applied + 1,
        last_event_at=e.occurred_at,
    )


def _api_key_created(state: ClusterState, e: ApiKeyCreated) -> ClusterState:
    if e.key_id in state.api_keys:  # a key id names one key for good: a second creation changes nothing
        return replace(state, events_applied=state.events_applied + 1, last_event_at=e.occurred_at)
    key = ApiKey(
        key_id=e.key_id,
        name=e.name,
        scope=e.scope,
        key_sha256=e.key_sha256,
        rps=e.rps,
        tokens_per_min=e.tokens_per_min,
        created_at=e.occurred_at,
        created_by=e.created_by,
    )
    return replace(
        state,
        api_keys=_with(state.api_keys, e.key_id, key),
        events_applied=state.events_applied + 1,
        last_event_at=e.occurred_at,
    )


def _api_key_revoked(state: ClusterState, e: ApiKeyRevoked) -> ClusterState:
    key = state.api_keys.get(e.key_id)
    if key is None or not key.live:
        return replace(state, events_applied=state.events_applied + 1, last_event_at=e.occurred_at)
    return replace(
        state,
        api_keys=_with(state.api_keys, e.key_id, replace(key, revoked_at=e.occurred_at)),
        events_applied=state.events_applied + 1,
        last_event_at=e.occurred_at,
    )


def _used(keys: dict[str, ApiKey], key_id: str | None, at: datetime, **increments: int) -> dict[str, ApiKey]:
    """``keys`` with the usage of ``key_id`` counted up (unchanged when no known key sent the request)."""
    key = keys.get(key_id) if key_id is not None else None
    if key is None:
        return keys
    usage = replace(
        key.usage,
        last_used_at=at,
        **{name: getattr(key.usage, name) + n for name, n in increments.items()},
    )
    return _with(keys, key.key_id, replace(key, usage=usage))


_HANDLERS: dict[type[Event], Callable[[ClusterState, Any], ClusterState]] = {
    ManifestApplied: _manifest_applied,
    DrainStarted: _drain_started,
    DrainCompleted: _drain_completed,
    WorkerJoined: _worker_joined,
    WorkerLost: _worker_lost,
    ModelPlaced: _model_placed,
    TierChanged: _tier_changed,
    SessionOpened: _session_opened,
    SessionTouched: _session_touched,
    SessionKvEvicted: _session_kv_evicted,
    SessionClosed: _session_closed,
    PrefixKvStored: _prefix_kv_stored,
    PrefixKvEvicted: _prefix_kv_evicted,
    RequestAdmitted: _request_admitted,
    RouterFired: _router_fired,
    RouterCalibrated: _router_calibrated,
    RequestDispatched: _request_dispatched,
    RequestRouted: _request_routed,
    RequestCompleted: _request_completed,
    RequestFailed: _request_failed,
    ApiKeyCreated: _api_key_created,
    ApiKeyRevoked: _api_key_revoked,
}

__all__ = ["AnyEvent", "evolve", "fold"]
