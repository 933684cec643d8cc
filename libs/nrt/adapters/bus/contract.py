"""The message contract: every subject, its payload and reply, who publishes and who subscribes.

One table (:data:`CHANNELS`) that the services' handlers are checked against (a test
compares their type hints with it) and that :func:`asyncapi` renders as an AsyncAPI 3.0
document through FastStream's own generator: one broker per service, each declaring
the subjects it subscribes to (with a handler typed by the contract) and publishes.
``nrt asyncapi`` prints it; the gateway serves it at ``/schema/asyncapi.json``.
"""

from __future__ import annotations

import json
from collections.abc import Iterator
from dataclasses import dataclass
from types import UnionType
from typing import Any, Literal, Union, get_args, get_origin

import msgspec

from nrt.adapters.bus import subjects
from nrt.adapters.bus.errors import ErrorFrame
from nrt.core.events import EVENT_TYPES, AnyEvent, Event
from nrt.core.protocol import (
    ApplyManifest,
    ApplyResult,
    Cancel,
    ClassifyReply,
    ControlCommand,
    ControlReply,
    CreateKey,
    EmbedReply,
    GatewayHeartbeat,
    Health,
    HealthQuery,
    InboxFrame,
    InferRequest,
    PromoteModel,
    PromoteResult,
    RevokeKey,
    RouteRequest,
    StateQuery,
    WhatIf,
    WorkerHeartbeat,
)
from nrt.core.state import ApiKey, ClusterState
from nrt.core.state.stream import StreamSnapshot, StreamSnapshotQuery
from nrt.core.whatif import WhatIfReport

Service = Literal["api_gateway", "router_svc", "specialist_worker", "cluster_state", "nrt"]
SERVICES: tuple[Service, ...] = ("api_gateway", "router_svc", "specialist_worker", "cluster_state", "nrt")
Transport = Literal["faststream", "raw", "jetstream"]


@dataclass(frozen=True, slots=True)
class Channel:
    address: str  # the subject; ``{name}`` marks a token the sender fills in (a NATS ``*`` for subscribers)
    payload: Any  # a msgspec Struct, or a union of them
    reply: Any  # what the subscriber answers (None: no reply; a stream of frames is described in ``summary``)
    publishers: tuple[Service, ...]
    subscribers: tuple[Service, ...]
    summary: str
    transport: Transport = "faststream"
    queue: str = ""  # the queue group subscribers share, if any

    @property
    def subject_pattern(self) -> str:
        """The subject a subscriber listens on: every ``{token}`` is a NATS ``*``."""
        return ".".join("*" if part.startswith("{") else part for part in self.address.split("."))


# Which services may publish each event type: each publishes on its own subjects (``nrt.events.<service>.<Type>``,
# the only event subjects the server lets it publish to), and the recorder and the followers take an event only
# from a subject this table allows for its type. router_svc is the entry model's worker: it joins, beats and
# records its tiers and sessions as workers do; cluster_state re-seeds a new stream from the log (``reseed``).
EVENT_PUBLISHERS: dict[str, tuple[Service, ...]] = {
    "ManifestApplied": ("cluster_state",),
    "DrainStarted": ("cluster_state",),
    "DrainCompleted": ("cluster_state",),
    "WorkerJoined": ("specialist_worker", "router_svc", "cluster_state"),
    "WorkerLost": ("specialist_worker", "router_svc", "cluster_state"),
    "ModelPlaced": ("cluster_state",),
    "TierChanged": ("specialist_worker", "router_svc", "cluster_state"),  # cluster_state re-seeds it
    "SessionOpened": ("specialist_worker", "router_svc"),
    "SessionTouched": ("specialist_worker", "router_svc"),
    "SessionKvEvicted": ("specialist_worker", "router_svc"),
    "SessionClosed": ("specialist_worker", "router_svc"),
    "PrefixKvStored": ("specialist_worker", "router_svc"),
    "PrefixKvEvicted": ("specialist_worker", "router_svc"),
    "RequestAdmitted": ("api_gateway",),
    "RouterFired": (),  # no longer written (RequestRouted): older logs hold it
    "RouterCalibrated": ("router_svc", "specialist_worker", "cluster_state"),  # the entry model's worker; re-seeds
    "RequestDispatched": (),  # no longer written (RequestRouted): older logs hold it
    "RequestRouted": ("router_svc",),
    "RequestCompleted": ("api_gateway",),
    "RequestFailed": ("api_gateway", "cluster_state"),  # cluster_state: a request whose gateway is gone
    "ApiKeyCreated": ("cluster_state",),  # asked by the gateway (nrt.keys.create) or given at start
    "ApiKeyRevoked": ("cluster_state",),  # asked by the gateway (nrt.keys.revoke)
}

CHANNELS: tuple[Channel, ...] = (
    Channel(
        address=subjects.ROUTE,
        payload=RouteRequest,
        reply=InboxFrame,
        publishers=("api_gateway",),
        subscribers=("router_svc",),
        summary=(
            "A chat request to route. router_svc classifies it with the entry model in its own process and "
            "forwards it to the target with the gateway's inbox as reply subject: the answering worker streams "
            "GenerateChunk frames there, the first one carrying router_svc's Dispatch (Nrt-Frame: data | last | "
            "end | error), after an Accepted frame naming the worker (Nrt-Frame: accepted). Three transits: "
            "gateway -> router_svc -> worker -> gateway."
        ),
        transport="raw",
        queue="nrt-router",
    ),
    Channel(
        address="nrt.infer.{model_id}",
        payload=InferRequest,
        reply=InboxFrame | ClassifyReply | EmbedReply,
        publishers=("router_svc", "api_gateway"),
        subscribers=("specialist_worker", "router_svc"),
        summary=(
            "Inference on one model: generate streams GenerateChunk frames to the reply subject (the gateway's "
            "inbox); classify answers a ClassifyReply, embed an EmbedReply (the gateway asks it for "
            "/v1/embeddings). router_svc serves the entry model's subject (it hosts that model) and classifies "
            "routed requests in its own process."
        ),
        transport="raw",
        queue=subjects.INFER_QUEUE,
    ),
    Channel(
        address="nrt.infer.{model_id}.{worker_id}",
        payload=InferRequest,
        reply=InboxFrame | ClassifyReply | EmbedReply,
        publishers=("router_svc",),
        subscribers=("specialist_worker", "router_svc"),
        summary=(
            "Inference on one model on one worker, as on nrt.infer.{model_id} but without a queue group: "
            "router_svc sends a session's turn to the worker holding its KV (or, before any worker does, to "
            "the one the session id hashes to) while that worker is alive."
        ),
        transport="raw",
    ),
    Channel(
        address=subjects.CANCEL,
        payload=Cancel,
        reply=None,
        publishers=("api_gateway",),
        subscribers=("specialist_worker", "router_svc"),
        summary=(
            "Stop generating a request: its client has gone. Every worker hears it; the one answering the request "
            "drops it from its batch before the next decode step."
        ),
        transport="raw",
    ),
    Channel(
        address="nrt.control.{worker_id}",
        payload=ControlCommand,
        reply=ControlReply,
        publishers=("cluster_state",),
        subscribers=("specialist_worker", "router_svc"),
        summary=(
            "A tier command for one worker (load, promote, demote, unload, evict_session), answered when done; "
            "router_svc instances are the entry model's workers."
        ),
    ),
    Channel(
        address=subjects.WORKER_HEARTBEAT,
        payload=WorkerHeartbeat,
        reply=None,
        publishers=("specialist_worker", "router_svc"),
        subscribers=("cluster_state", "api_gateway"),
        summary=(
            "A worker's liveness, resources and hosted models, every few seconds; api_gateway reads its count of "
            "NATS reconnects (what was on its old connection may be gone: the requests it held end at once)."
        ),
    ),
    Channel(
        address=subjects.GATEWAY_HEARTBEAT,
        payload=GatewayHeartbeat,
        reply=None,
        publishers=("api_gateway",),
        subscribers=("cluster_state",),
        summary=(
            "A gateway process is alive, every few seconds: the requests it admitted have an owner. cluster_state "
            "ends those of a gateway gone silent (RequestFailed owner_lost)."
        ),
    ),
    Channel(
        address=subjects.STATE,
        payload=StateQuery,
        reply=ClusterState,
        publishers=("api_gateway", "nrt"),
        subscribers=("cluster_state",),
        summary="The folded ClusterState that cluster_state recorded (an empty body is a StateQuery too).",
    ),
    Channel(
        address=subjects.STATE_SNAPSHOT,
        payload=StreamSnapshotQuery,
        reply=StreamSnapshot,
        publishers=("api_gateway", "router_svc", "specialist_worker"),
        subscribers=("cluster_state",),
        summary=(
            f"cluster_state's folded state placed on the stream {subjects.EVENTS_STREAM}: the stream sequence up "
            "to which every message is in it, and the ids of the events in it that the stream carries later (its "
            "decisions on their way). A follower that finds the stream's first message past sequence 1 (the "
            "stream's retention dropped the start) starts from it and follows the next sequence on."
        ),
    ),
    Channel(
        address=subjects.MANIFEST_APPLY,
        payload=ApplyManifest,
        reply=ApplyResult,
        publishers=("api_gateway",),
        subscribers=("cluster_state",),
        summary="Replace the manifest in force with a drained swap.",
    ),
    Channel(
        address=subjects.MANIFEST_WHATIF,
        payload=WhatIf,
        reply=WhatIfReport,
        publishers=("api_gateway",),
        subscribers=("cluster_state",),
        summary=(
            "A candidate manifest's what-if, applying nothing (PUT /v1/manifest?dry_run=true): the recorded "
            "requests (audit.record_prompts) through its router, budgets and policies, from the PostgreSQL log."
        ),
    ),
    Channel(
        address=subjects.KEYS_CREATE,
        payload=CreateKey,
        reply=ApiKey,
        publishers=("api_gateway",),
        subscribers=("cluster_state",),
        summary="Record a new API key (its SHA-256, never the key) as ApiKeyCreated; answered once folded.",
    ),
    Channel(
        address=subjects.KEYS_REVOKE,
        payload=RevokeKey,
        reply=ApiKey,
        publishers=("api_gateway",),
        subscribers=("cluster_state",),
        summary="Revoke an API key (ApiKeyRevoked); answered once folded. The last live admin key stays.",
    ),
    Channel(
        address=subjects.PROMOTE,
        payload=PromoteModel,
        reply=PromoteResult,
        publishers=("specialist_worker", "router_svc"),
        subscribers=("cluster_state",),
        summary="Make a model resident within the budget, or answer 503 budget_exhausted with the numbers.",
    ),
    Channel(
        address="nrt.health.{service}",
        payload=HealthQuery,
        reply=Health,
        publishers=("api_gateway", "nrt"),
        subscribers=("api_gateway", "router_svc", "specialist_worker", "cluster_state"),
        summary="Is a service alive: its instance id and uptime.",
    ),
    Channel(
        address="nrt.events.{service}.{type}",
        payload=AnyEvent,
        reply=None,
        publishers=("api_gateway", "router_svc", "specialist_worker", "cluster_state"),
        subscribers=("cluster_state", "api_gateway", "router_svc", "specialist_worker"),
        summary=(
            f"Every fact, on the JetStream stream {subjects.EVENTS_STREAM} (message id = event id), under its "
            "publisher's own prefix. cluster_state records it in PostgreSQL (durable consumer) if its subject may "
            "carry its type (else it is rejected, counted and logged); the others fold the control plane (ordered "
            "consumers filtered on the allowed subjects). Each event type's publishers: "
            + "; ".join(f"{name}: {', '.join(by)}" for name, by in EVENT_PUBLISHERS.items())
        ),
        transport="jetstream",
    ),
)

ERROR_REPLY = ErrorFrame  # any request may be answered with this instead, under the header Nrt-Frame: error


def channel(address: str) -> Channel:
    for c in CHANNELS:
        if c.address == address:
            return c
    raise KeyError(address)


def event_subjects(type_name: str) -> tuple[str, ...]:
    """The subjects an event of ``type_name`` may arrive on: one per service allowed to publish it."""
    return tuple(subjects.event(service, type_name) for service in EVENT_PUBLISHERS.get(type_name, ()))


def may_carry(subject: str, type_name: str) -> bool:
    """Whether an event of ``type_name`` may arrive on ``subject`` (its publisher is allowed that type)."""
    origin = subjects.event_origin(subject)
    return origin is not None and origin[1] == type_name and origin[0] in EVENT_PUBLISHERS.get(type_name, ())


def first_publisher(type_name: str) -> Service:
    """The first service the contract lets publish ``type_name`` (for tools and tests that publish as it)."""
    publishers = EVENT_PUBLISHERS.get(type_name, ())
    if not publishers:
        raise ValueError(f"no service publishes {type_name} any more (only older logs hold it)")
    return publishers[0]


def covers(subject: str) -> bool:
    """Whether a concrete subject (``nrt.infer.billing``) is one of the contract's channels."""
    parts = subject.split(".")
    for c in CHANNELS:
        pattern = c.address.split(".")
        if len(pattern) == len(parts) and all(p.startswith("{") or p == s for p, s in zip(pattern, parts, strict=True)):
            return True
    return False


# -- AsyncAPI, through FastStream's generator -------------------------------------------------


def members(kind: Any) -> Iterator[type[msgspec.Struct]]:
    """The Struct types of a payload (a Struct, or a union of them)."""
    if get_origin(kind) in (Union, UnionType):
        for arg in get_args(kind):
            yield from members(arg)
    elif isinstance(kind, type) and issubclass(kind, msgspec.Struct):
        yield kind


def _inline(schema: Any, defs: dict[str, Any]) -> Any:
    """msgspec's JSON schema with every ``$ref`` replaced by its definition (pydantic nests no refs of ours)."""
    if isinstance(schema, dict):
        if "$ref" in schema:
            return _inline(defs[schema["$ref"].rsplit("/", 1)[1]], defs)
        return {k: _inline(v, defs) for k, v in schema.items()}
    if isinstance(schema, list):
        return [_inline(v, defs) for v in schema]
    return schema


def _describe_to_pydantic(kind: type[msgspec.Struct]) -> None:
    """Let pydantic (which FastStream's AsyncAPI generator uses) describe a msgspec Struct by msgspec's schema."""
    if "__get_pydantic_json_schema__" in vars(kind):
        return
    from pydantic_core import core_schema

    def core(cls: type[msgspec.Struct], source: Any, handler: Any) -> Any:
        return core_schema.no_info_plain_validator_function(lambda value: msgspec.convert(value, cls))

    def json_schema(cls: type[msgspec.Struct], schema: Any, handler: Any) -> Any:
        (own,), defs = msgspec.json.schema_components([cls])
        return _inline(own, defs)

    setattr(kind, "__get_pydantic_core_schema__", classmethod(core))  # noqa: B010
    setattr(kind, "__get_pydantic_json_schema__", classmethod(json_schema))  # noqa: B010


def _stub(payload: Any, reply: Any, summary: str) -> Any:
    """A handler with the contract's types, for the generator to read (never called)."""

    async def handler(message: Any) -> Any:  # pragma: no cover - documentation only
        raise NotImplementedError

    handler.__annotations__ = {"message": payload, "return": reply if reply is not None else None}
    handler.__doc__ = summary
    return handler


def asyncapi() -> dict[str, Any]:
    """The AsyncAPI 3.0 document of the whole contract, as JSON-ready data."""
    from faststream.nats import NatsBroker
    from faststream.specification import AsyncAPI

    from nrt.adapters.bus.broker import new_broker

    for c in CHANNELS:
        for kind in (*members(c.payload), *members(c.reply), *members(Event), *EVENT_TYPES):
            _describe_to_pydantic(kind)
    brokers: list[NatsBroker] = []
    for service in SERVICES:
        broker = new_broker("nats://nats:4222", service)
        for c in CHANNELS:
            how = f" [{c.transport}]"
            if service in c.subscribers:
                subscriber = broker.subscriber(
                    c.address,
                    queue=c.queue,
                    title=f"{service} receives {c.address}",
                    description=c.summary + how,
                )
                subscriber(_stub(c.payload, c.reply, c.summary))
            if service in c.publishers:
                broker.publisher(
                    c.address, title=f"{service} sends {c.address}", description=c.summary + how, schema=c.payload
                )
        brokers.append(broker)
    spec = AsyncAPI(
        *brokers,
        title="NRT message contract",
        version="1",
        description=(
            "Every NATS subject NRT uses. Requests are JSON (msgspec); every reply carries the header Nrt-Frame "
            "(data | last | end | error); an error reply is an ErrorFrame {code, message, status}."
        ),
        schema_version="3.0.0",
    ).to_specification()
    document: dict[str, Any] = json.loads(spec.to_json())
    document.setdefault("components", {}).setdefault("schemas", {})["ErrorFrame"] = msgspec.json.schema(ErrorFrame)
    return document
