"""Every NATS subject and stream name NRT uses, in one place."""

from __future__ import annotations

PREFIX = "nrt"

ROUTE = f"{PREFIX}.route"  # gateway -> router_svc: a routed chat request (reply: the gateway's inbox)
STATE = f"{PREFIX}.state.get"  # -> cluster_state: the folded ClusterState
MANIFEST_APPLY = f"{PREFIX}.manifest.apply"  # -> cluster_state: start a drained manifest swap
KEYS_CREATE = f"{PREFIX}.keys.create"  # -> cluster_state: record a new API key (its hash)
KEYS_REVOKE = f"{PREFIX}.keys.revoke"  # -> cluster_state: revoke an API key
PROMOTE = f"{PREFIX}.models.promote"  # -> cluster_state: make a model resident within the budget (or 503 why not)
CANCEL = f"{PREFIX}.requests.cancel"  # gateway -> every worker: stop generating a request (its client has gone)
WORKER_HEARTBEAT = f"{PREFIX}.workers.heartbeat"  # worker -> cluster_state, every few seconds

EVENTS_STREAM = "NRT_EVENTS"  # the JetStream stream that carries every event
EVENTS_PREFIX = f"{PREFIX}.events"
EVENTS_ALL = f"{EVENTS_PREFIX}.>"

INFER_QUEUE = "nrt-workers"  # queue group: several workers may serve one model


def infer(model_id: str) -> str:
    """Requests for one model (generate, classify, embed); workers subscribe in INFER_QUEUE."""
    return f"{PREFIX}.infer.{model_id}"


def control(worker_id: str) -> str:
    """Control commands (load, promote, demote, unload, evict_session) for one worker."""
    return f"{PREFIX}.control.{worker_id}"


def event(type_name: str) -> str:
    """The subject an event of ``type_name`` is published on."""
    return f"{EVENTS_PREFIX}.{type_name}"
