"""Put the state in force back on an events stream that is behind the log.

PostgreSQL is the source of truth; the JetStream stream is how the other services see it:
the gateway, router_svc and the workers fold the stream from its start. A new or
recreated stream (NATS lost its store, or NRT_NATS_URL names another server) lacks what
the log holds, so they would never see a manifest. On start, once the recorder has caught
up, cluster_state checks that the stream's last ``ManifestApplied`` is the one in force;
when it is not, and the stream still holds its first message (a stream whose retention
dropped its start is not behind: its followers start from cluster_state's snapshot,
``nrt.core.state.stream``), it re-publishes from the log the events the current state is made of:

- the last ``ManifestApplied`` and any drain events after it (the manifest in force);
- each live worker's last ``WorkerJoined``;
- for each placement on a live worker, its last ``ModelPlaced`` and ``TierChanged``;
- for each model still placed somewhere live, its last ``RouterCalibrated`` (the router's floor);
- every ``ApiKeyCreated`` and ``ApiKeyRevoked`` (the keys the gateway checks).

They go out in log order and as recorded, event ids included, so the recorder gets them
back as events the log already holds and skips them: the log gains no row and its hash
chain is untouched. Request history, sessions and counters stay in the log only (``nrt
replay`` folds them); placement and routing need none of them.
"""

from __future__ import annotations

from nats.js import JetStreamContext
from nats.js.errors import NotFoundError

from nrt.adapters.bus import subjects
from nrt.core.eventlog import EventLog, RecordedEvent
from nrt.core.events import (
    CONTROL_PLANE,
    ApiKeyCreated,
    ApiKeyRevoked,
    DrainCompleted,
    DrainStarted,
    Event,
    EventDecodeError,
    ManifestApplied,
    ModelPlaced,
    RouterCalibrated,
    TierChanged,
    WorkerJoined,
    decode,
)
from nrt.core.state import ClusterState, evolve

# the events that decide the manifest, the workers and the placements (nothing else changes them)
STATE_TYPES = tuple(t.__name__ for t in CONTROL_PLANE)


async def stream_holds_manifest(js: JetStreamContext, cluster: ClusterState) -> bool:
    """Whether the stream's last ``ManifestApplied`` is the manifest in force in ``cluster``."""
    try:
        message = await js.get_last_msg(
            subjects.EVENTS_STREAM, subjects.event("cluster_state", ManifestApplied.__name__)
        )
        event = decode(message.data or b"")
    except (NotFoundError, EventDecodeError):
        return False
    return (
        isinstance(event, ManifestApplied)
        and event.version == cluster.manifest_version
        and event.digest == cluster.manifest_digest
    )


class StateInForce:
    """Fold the log's state events, remembering the last event behind each part of the state."""

    def __init__(self) -> None:
        self.state = ClusterState()
        self._manifest: list[RecordedEvent] = []  # the last ManifestApplied and the drain events after it
        self._joined: dict[str, RecordedEvent] = {}
        self._placed: dict[tuple[str, str], RecordedEvent] = {}
        self._tiers: dict[tuple[str, str], RecordedEvent] = {}
        self._calibrated: dict[str, RecordedEvent] = {}
        self._keys: list[RecordedEvent] = []

    def add(self, record: RecordedEvent) -> None:
        event = record.event
        self.state = evolve(self.state, event)
        if isinstance(event, ManifestApplied):
            self._manifest = [record]
        elif isinstance(event, DrainStarted | DrainCompleted):
            self._manifest.append(record)
        elif isinstance(event, WorkerJoined):
            self._joined[event.worker_id] = record
        elif isinstance(event, ModelPlaced):
            self._placed[(event.model_id, event.worker_id)] = record
        elif isinstance(event, TierChanged):
            self._tiers[(event.model_id, event.worker_id)] = record
        elif isinstance(event, RouterCalibrated):
            self._calibrated[event.model_id] = record
        elif isinstance(event, ApiKeyCreated | ApiKeyRevoked):
            self._keys.append(record)

    def events(self) -> list[Event]:
        """The events that rebuild the manifest, the live workers, their placements, the routers'
        calibrated floors and the API keys, in log order."""
        live = {worker_id for worker_id, worker in self.state.workers.items() if worker.alive}
        chosen = [*self._manifest, *self._keys, *(self._joined[w] for w in live if w in self._joined)]
        for model_id, model in self.state.models.items():
            for worker_id in model.placements:
                if worker_id in live:
                    key = (model_id, worker_id)
                    chosen += [r for r in (self._placed.get(key), self._tiers.get(key)) if r is not None]
            if model.calibrated is not None and live.intersection(model.placements) and model_id in self._calibrated:
                chosen.append(self._calibrated[model_id])
        return [r.event for r in sorted(chosen, key=lambda r: r.position)]


async def state_in_force(store: EventLog, page: int = 10_000) -> list[Event]:
    """The log's events that make up its manifest, live workers and placements (see ``StateInForce``)."""
    found = StateInForce()
    after = 0
    while records := await store.query(types=STATE_TYPES, after_position=after, limit=page):
        for record in records:
            found.add(record)
        after = records[-1].position
    return found.events()
