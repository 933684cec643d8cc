"""ClusterState: what the event log says the cluster looks like. Immutable values only."""

from __future__ import annotations

from datetime import datetime  # at run time: msgspec resolves it to decode a ClusterState (nrt.state.get)

import msgspec

from nrt.core.device import Device
from nrt.core.events.schema import RouterCalibrated
from nrt.core.vocabulary import KeyScope, Reason, Tier, WorkerRole


class Placement(msgspec.Struct, frozen=True, kw_only=True):
    worker_id: str
    tier: Tier
    bytes_held: int = 0
    since: datetime


class LoadFailure(msgspec.Struct, frozen=True, kw_only=True):
    """A load of a model on a worker that failed (a ``TierChanged`` with reason ``load_failed``)."""

    worker_id: str
    artifact: str  # the source it was placed with (what the worker could not load)
    error: str  # what the worker said; "" for a failure recorded before events carried it
    at: datetime


class ModelState(msgspec.Struct, frozen=True, kw_only=True):
    model_id: str
    artifact: str = ""
    placements: dict[str, Placement] = {}  # by worker id; never mutated in place
    last_used_at: datetime | None = None
    requests: int = 0
    promotions: int = 0
    demotions: int = 0
    cold_starts: int = 0
    calibrated: RouterCalibrated | None = None  # a router model's own confidence floor, the latest
    # by worker id: its last failed load of this model, until it loads it or joins again
    load_failures: dict[str, LoadFailure] = {}

    @property
    def tiers(self) -> dict[str, Tier]:
        return {worker: p.tier for worker, p in self.placements.items()}

    @property
    def last_failure(self) -> LoadFailure | None:
        """The latest of its standing load failures (None: none)."""
        return max(self.load_failures.values(), key=lambda f: f.at, default=None)


class SessionState(msgspec.Struct, frozen=True, kw_only=True):
    session_id: str
    model_id: str
    worker_id: str
    opened_at: datetime
    last_used_at: datetime
    turns: int = 0
    cached_tokens: int = 0
    kv_bytes: int = 0  # measured by its worker after its last turn; counted against the resident budget
    kv_evicted: bool = False
    evicted_reason: Reason | None = None  # why its KV went (idle, max_active_sessions, ...)


class PrefixState(msgspec.Struct, frozen=True, kw_only=True):
    """A shared prompt prefix's KV held by a worker for a model (``PrefixKvStored`` until ``PrefixKvEvicted``)."""

    model_id: str
    worker_id: str
    prefix_key: str
    tokens: int
    kv_bytes: int  # measured by its worker; counted against the resident budget like session KV
    stored_at: datetime


def prefix_id(worker_id: str, model_id: str, prefix_key: str) -> str:
    """A held prefix's key in ``ClusterState.prefixes``."""
    return f"{worker_id}/{model_id}/{prefix_key}"


class WorkerState(msgspec.Struct, frozen=True, kw_only=True):
    worker_id: str
    host: str
    cpu_count: int
    ram_bytes: int
    accelerator_bytes: int = 0
    providers: tuple[str, ...] = ()
    joined_at: datetime
    alive: bool = True
    role: WorkerRole = WorkerRole.SPECIALIST
    device: Device | None = None  # what it runs models on, as it said when it joined

    @property
    def accelerator(self) -> bool:
        """It has a GPU: its residents count against the GPU's memory (else against its RAM)."""
        return self.accelerator_bytes > 0


class KeyUsage(msgspec.Struct, frozen=True, kw_only=True):
    """What one API key's requests used, as the log recorded them."""

    requests: int = 0  # admitted
    completed: int = 0
    failed: int = 0
    prompt_tokens: int = 0
    completion_tokens: int = 0
    last_used_at: datetime | None = None


class ApiKey(msgspec.Struct, frozen=True, kw_only=True):
    """An API key as the log knows it: its hash (never the key), scope, limits and usage."""

    key_id: str
    name: str
    scope: KeyScope
    key_sha256: str
    rps: float | None = None
    tokens_per_min: int | None = None
    created_at: datetime
    created_by: str | None = None
    revoked_at: datetime | None = None
    usage: KeyUsage = KeyUsage()

    @property
    def live(self) -> bool:
        return self.revoked_at is None


class Counters(msgspec.Struct, frozen=True, kw_only=True):
    requests_admitted: int = 0
    requests_completed: int = 0
    requests_failed: int = 0
    router_fired: int = 0
    dispatches: int = 0
    tier_changes: int = 0
    cold_starts: int = 0
    kv_evictions: int = 0
    prompt_tokens: int = 0
    completion_tokens: int = 0
    manifests_applied: int = 0
    drains: int = 0


class ClusterState(msgspec.Struct, frozen=True, kw_only=True):
    cluster: str | None = None
    manifest_version: int = 0
    manifest_digest: str | None = None
    manifest_text: str | None = None
    draining: bool = False
    drain_to_version: int | None = None
    workers: dict[str, WorkerState] = {}
    models: dict[str, ModelState] = {}
    sessions: dict[str, SessionState] = {}
    prefixes: dict[str, PrefixState] = {}  # by prefix_id(worker, model, key): the shared prefixes' KV held
    in_flight: dict[str, int] = {}  # request id -> manifest version it was admitted under
    admitted_by: dict[str, str] = {}  # request id in flight -> the gateway that admitted it (where it said)
    # request id -> when its end was folded before its start (a RequestAdmitted its gateway sent again, after its NATS
    # server died unacknowledged, stored after the request's end): its start, when it comes, does not put it in flight
    ended_early: dict[str, datetime] = {}
    intents: dict[str, int] = {}  # how often the entry model chose each intent
    api_keys: dict[str, ApiKey] = {}  # by key id, revoked ones included
    counters: Counters = Counters()
    events_applied: int = 0
    last_event_at: datetime | None = None

    def in_flight_under(self, version: int) -> int:
        return sum(1 for v in self.in_flight.values() if v == version)
