"""Every NATS subject and stream name NRT uses, in one place."""

from __future__ import annotations

PREFIX = "nrt"

ROUTE = f"{PREFIX}.route"  # gateway -> router_svc: a routed chat request (reply: the gateway's inbox)
STATE = f"{PREFIX}.state.get"  # -> cluster_state: the folded ClusterState
STATE_SNAPSHOT = f"{PREFIX}.state.snapshot"  # -> cluster_state: its fold placed on the stream (a follower behind it)
MANIFEST_APPLY = f"{PREFIX}.manifest.apply"  # -> cluster_state: start a drained manifest swap
MANIFEST_WHATIF = f"{PREFIX}.manifest.whatif"  # -> cluster_state: a candidate's what-if over the recorded requests
KEYS_CREATE = f"{PREFIX}.keys.create"  # -> cluster_state: record a new API key (its hash)
KEYS_REVOKE = f"{PREFIX}.keys.revoke"  # -> cluster_state: revoke an API key
PROMOTE = f"{PREFIX}.models.promote"  # -> cluster_state: make a model resident within the budget (or 503 why not)
CANCEL = f"{PREFIX}.requests.cancel"  # gateway -> every worker: stop generating a request (its client has gone)
WORKER_HEARTBEAT = f"{PREFIX}.workers.heartbeat"  # worker -> cluster_state, every few seconds
GATEWAY_HEARTBEAT = f"{PREFIX}.gateways.heartbeat"  # gateway -> cluster_state: its requests have an owner

EVENTS_STREAM = "NRT_EVENTS"  # the JetStream stream that carries every event
RATE_LIMITS_BUCKET = "NRT_RATE_LIMITS"  # JetStream KV: each API key's rate-limit buckets, shared by the gateways
EVENTS_PREFIX = f"{PREFIX}.events"
EVENTS_ALL = f"{EVENTS_PREFIX}.>"  # nrt.events.<service>.<Type>

INFER_QUEUE = "nrt-workers"  # queue group: several workers may serve one model


def infer(model_id: str) -> str:
    """Requests for one model (generate, classify, embed); workers subscribe in INFER_QUEUE."""
    return f"{PREFIX}.infer.{model_id}"


def infer_at(model_id: str, worker_id: str) -> str:
    """Requests for one model on one worker (no queue group): a session's turn sent to the worker
    holding its KV (``nrt.core.routing.affinity``)."""
    return f"{PREFIX}.infer.{model_id}.{worker_id}"


def control(worker_id: str) -> str:
    """Control commands (load, promote, demote, unload, evict_session) for one worker."""
    return f"{PREFIX}.control.{worker_id}"


def event(service: str, type_name: str) -> str:
    """The subject ``service`` publishes an event of ``type_name`` on: under its own prefix, which the
    server lets only that service publish to (``nrt.adapters.bus.auth``)."""
    return f"{EVENTS_PREFIX}.{service}.{type_name}"


def events_of(service: str) -> str:
    """Every subject ``service`` may publish events on."""
    return f"{EVENTS_PREFIX}.{service}.*"


def event_origin(subject: str) -> tuple[str, str] | None:
    """``(service, type)`` of an event subject (``nrt.events.<service>.<Type>``), None for any other subject."""
    parts = subject.split(".")
    if len(parts) != 4 or ".".join(parts[:2]) != EVENTS_PREFIX or not parts[2] or not parts[3]:
        return None
    return parts[2], parts[3]
