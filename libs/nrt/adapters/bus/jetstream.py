"""The JetStream stream that carries every event, and publishing to it."""

from __future__ import annotations

import asyncio
import logging
import time
from collections.abc import Awaitable, Mapping
from dataclasses import dataclass, replace

from nats.aio.client import Client
from nats.errors import NoRespondersError
from nats.errors import TimeoutError as NatsTimeoutError
from nats.js import JetStreamContext
from nats.js.api import (
    DiscardPolicy,
    KeyValueConfig,
    ObjectStoreConfig,
    RetentionPolicy,
    StorageType,
    StreamConfig,
    StreamInfo,
)
from nats.js.errors import APIError, BucketNotFoundError, NotFoundError, ServiceUnavailableError
from nats.js.kv import KeyValue
from nats.js.object_store import ObjectStore

from nrt.adapters.bus import subjects
from nrt.adapters.bus.contract import Service, first_publisher
from nrt.adapters.bus.tracing import inject
from nrt.adapters.settings import EVENTS_STREAM_MAX_AGE_S, EVENTS_STREAM_MAX_MSGS, EventsStreamSettings
from nrt.core.events import VERSION_HEADER, Event, EventDecodeError, encode, schema_version

ARTIFACTS_BUCKET = "NRT_ARTIFACTS"  # the object store of prepared artifacts (nrt.adapters.bus.artifact_store)
ARTIFACTS_STREAM = f"OBJ_{ARTIFACTS_BUCKET}"  # the stream nats keeps it in
DUPLICATE_WINDOW_S = 120.0  # a re-published event id within this window is dropped by JetStream

log = logging.getLogger("nrt.adapters.bus.jetstream")


@dataclass(frozen=True, slots=True)
class StreamLimits:
    """How much of the log the events stream keeps: PostgreSQL holds all of it, the stream only the recent
    part (a follower that starts behind the stream's first message takes a snapshot from cluster_state).
    0 means no limit. cluster_state's recorder must never lag further behind than this: what the stream
    drops before the recorder stored it is lost to the log."""

    max_msgs: int = EVENTS_STREAM_MAX_MSGS
    max_age_s: float = EVENTS_STREAM_MAX_AGE_S

    @classmethod
    def of(cls, settings: EventsStreamSettings) -> StreamLimits:
        return cls(max_msgs=settings.events_stream_max_msgs, max_age_s=settings.events_stream_max_age_s)

    def __post_init__(self) -> None:
        if self.max_msgs < 0 or self.max_age_s < 0:
            raise ValueError(
                f"stream limits must not be negative (max_msgs={self.max_msgs}, max_age_s={self.max_age_s})"
            )

    @property
    def jetstream_max_msgs(self) -> int:
        return self.max_msgs or -1  # JetStream's "no limit"

    def matches(self, config: StreamConfig) -> bool:
        """Whether an existing stream's configuration has these limits."""
        max_msgs = config.max_msgs if config.max_msgs is not None else -1
        max_age = config.max_age or 0.0
        return max_msgs == self.jetstream_max_msgs and abs(max_age - self.max_age_s) < 1e-3


# JetStream's answers to more copies than it has servers for: "no suitable peers for placement" and "insufficient
# resources" (a cluster), "replicas > 1 not supported in non-clustered mode" (a standalone server)
_TOO_FEW_SERVERS = frozenset({10005, 10023, 10074})


class StreamReplicasError(RuntimeError):
    """JetStream cannot keep the events stream with the copies asked for (fewer servers with JetStream)."""


async def ensure_events_stream(
    js: JetStreamContext,
    name: str = subjects.EVENTS_STREAM,
    limits: StreamLimits | None = None,
    *,
    replicas: int = 1,
    update: bool = False,
    wait_s: float = 0.0,
) -> StreamInfo:
    """Create the events stream if it does not exist (file storage, deduplicated by event id, the oldest
    messages discarded beyond ``limits``, ``replicas`` copies on a NATS cluster); with ``update`` (the stream's
    owners: cluster_state, ``nrt up``), bring an existing stream's limits to ``limits`` and raise its copies to
    ``replicas`` (never lowered: a cluster that lost servers keeps what it has). ``wait_s``: how long to wait
    for JetStream to answer (a cluster that is still electing its leader). Returns the stream's info."""
    limits = limits or StreamLimits()
    try:
        info = await _stream_info(js, name, wait_s)
    except NotFoundError:
        config = StreamConfig(
            name=name,
            subjects=[subjects.EVENTS_ALL],
            storage=StorageType.FILE,
            retention=RetentionPolicy.LIMITS,
            discard=DiscardPolicy.OLD,
            duplicate_window=DUPLICATE_WINDOW_S,
            max_msgs=limits.jetstream_max_msgs,
            max_age=limits.max_age_s,
            num_replicas=replicas,
        )
        return await _replicated(js.add_stream(config), name, replicas)
    had = info.config.num_replicas or 1
    more = replicas > had
    if not update or (limits.matches(info.config) and not more):
        return info
    config = replace(
        info.config, max_msgs=limits.jetstream_max_msgs, max_age=limits.max_age_s, num_replicas=max(replicas, had)
    )
    updated = await _replicated(js.update_stream(config), name, replicas)
    if more:
        log.info("stream %s now kept in %d copies (was %d)", name, replicas, had)
    if not limits.matches(info.config):
        log.info(
            "stream %s now keeps at most %s messages for at most %s (was %s messages, %s)",
            name,
            limits.max_msgs or "any number of",
            f"{limits.max_age_s:g} s" if limits.max_age_s else "any time",
            info.config.max_msgs,
            f"{info.config.max_age:g} s" if info.config.max_age else "any time",
        )
    return updated


async def ensure_kv_bucket(js: JetStreamContext, bucket: str, description: str, *, replicas: int = 1) -> KeyValue:
    """The JetStream KV bucket ``bucket``, created if it does not exist (file storage, the latest value of each
    key only, ``replicas`` copies: give the events stream's). Creating it twice at once is harmless."""
    try:
        return await js.key_value(bucket)
    except BucketNotFoundError:
        pass
    config = KeyValueConfig(
        bucket=bucket,
        description=description,
        history=1,
        storage=StorageType.FILE,
        replicas=replicas,
        direct=True,  # reads by the last value of a subject, served by any replica (a stale one fails its CAS)
    )
    return await js.create_key_value(config)


async def ensure_artifacts_bucket(
    js: JetStreamContext, name: str = ARTIFACTS_BUCKET, *, replicas: int = 1
) -> ObjectStore:
    """The object store of prepared artifacts, created if it does not exist (file storage, ``replicas`` copies,
    no limit of its own: the server's JetStream store limit bounds it). Every bucket NRT uses is created here."""
    try:
        return await js.object_store(name)
    except BucketNotFoundError:
        config = ObjectStoreConfig(
            description="NRT's prepared model artifacts: files by sha256, manifests by artifact name and variant",
            storage=StorageType.FILE,
            replicas=replicas,
        )
        return await js.create_object_store(name, config=config)


async def _stream_info(js: JetStreamContext, name: str, wait_s: float) -> StreamInfo:
    """The stream's info, asking again while JetStream says it is not available yet (within ``wait_s``)."""
    deadline = time.monotonic() + wait_s
    while True:
        try:
            return await js.stream_info(name)
        except (ServiceUnavailableError, NatsTimeoutError, NoRespondersError):
            if time.monotonic() >= deadline:
                raise
            await asyncio.sleep(0.2)


async def _replicated(request: Awaitable[StreamInfo], name: str, replicas: int) -> StreamInfo:
    try:
        return await request
    except APIError as exc:
        if replicas > 1 and exc.err_code in _TOO_FEW_SERVERS:
            raise StreamReplicasError(
                f"JetStream cannot keep stream {name} in {replicas} copies ({exc.description}): the NATS cluster has "
                f"fewer than {replicas} servers with JetStream up; start them, or set NRT_NATS_REPLICAS lower"
            ) from None
        raise


def event_subject(type_name: str, service: Service | None) -> str:
    """The subject ``service`` publishes an event of ``type_name`` on; with no service, the subject of the
    type's first publisher in the contract (tools and tests on an open bus)."""
    return subjects.event(service or first_publisher(type_name), type_name)


def event_headers(event: Event) -> dict[str, str]:
    """A message's headers for ``event``: its id as the message id (JetStream drops a re-sent id), its
    schema version (readers upcast an older one), and the caller's trace context."""
    return inject({"Nats-Msg-Id": event.event_id, VERSION_HEADER: str(schema_version(event.type))})


def message_version(headers: Mapping[str, str] | None) -> int:
    """The schema version of a message's body: its version header; a message without one was published
    before events carried it and is read as version 1 (upcasters accept later bodies too)."""
    value = (headers or {}).get(VERSION_HEADER)
    if value is None:
        return 1
    try:
        return int(value)
    except ValueError:
        raise EventDecodeError(f"the {VERSION_HEADER} header {value!r} is not a version number") from None


class EventPublisher:
    """Publishes events to JetStream as ``service``; the event id is the message id, so a retry is never stored
    twice. Without a service each event goes out as its type's first publisher (``event_subject``)."""

    def __init__(self, nc: Client, timeout: float = 5.0, *, service: Service | None = None) -> None:
        self.js = nc.jetstream(timeout=timeout)
        self.service = service

    async def publish(self, event: Event) -> int:
        """Publish ``event``; returns its JetStream sequence once the stream has stored it."""
        ack = await self.js.publish(
            event_subject(event.type, self.service), encode(event), headers=event_headers(event)
        )
        return ack.seq
