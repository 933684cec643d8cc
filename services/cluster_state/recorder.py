"""Record the JetStream event stream in PostgreSQL: durable, in order, exactly once in the log.

A durable pull consumer delivers the stream in sequence order. Each fetched batch is
appended with ``EventLog.append`` in one transaction together with the stream
sequence of its last message (``consumer_checkpoints``); only then are the messages
acknowledged. A crash before the commit redelivers the batch; a crash after the commit
but before the ack redelivers events the store already holds, which it skips by event
id. Either way the log gets every event once, in stream order.

An event is recorded only if the subject it arrived on may carry its type: the server lets each
service publish only under its own prefix (``nrt.events.<service>.<Type>``, ``nrt.adapters.bus.auth``), and
the contract says which services may publish each type (``contract.EVENT_PUBLISHERS``). Anything
else (a worker's ``ManifestApplied``, a subject naming one type and a body another) is rejected:
never stored nor folded, counted in ``rejected``, logged, and acknowledged with its batch so that
it is not delivered again.

On every start the consumer is positioned right after the checkpoint, so the log
neither misses nor repeats what the stream holds, and nothing a killed predecessor had
fetched waits for a redelivery behind newer events.

The stream keeps only the recent part of the log (``StreamLimits``, applied to the stream at
start). The durable consumer does not hold messages back from the limits: what the stream drops
before it is recorded never reaches the log (logged as an error at start). The limits must
exceed how far the recorder may fall behind — while cluster_state is down, or slower than the
traffic — and the recorder warns once it is more than half of ``max_msgs`` behind.

Only the leader fetches (``may_fetch``: its lease runs): a deposed leader that wakes up must not take
messages from the consumer its successor re-created under the same durable name.

This loop is the one JetStream consumer not on FastStream: it takes what the stream has at
once, lingers ``linger_s`` for more, commits, then acknowledges; a failed append is retried
in place and never acknowledged; ``caught_up`` tells the service when the backlog is folded.
FastStream's batch pull subscriber acknowledges once its handler returns, and a failure that
the brokers' error-frame middleware answers counts as handled there.
"""

from __future__ import annotations

import asyncio
import contextlib
import functools
import logging
import time
from collections.abc import Awaitable, Callable, Mapping
from dataclasses import dataclass

from nats.aio.client import Client
from nats.aio.msg import Msg
from nats.errors import NoRespondersError
from nats.js import JetStreamContext
from nats.js.api import AckPolicy, ConsumerConfig, DeliverPolicy, RawStreamMsg
from nats.js.errors import NotFoundError, ServiceUnavailableError

from nrt.adapters.bus import subjects
from nrt.adapters.bus.contract import may_carry
from nrt.adapters.bus.jetstream import StreamLimits, ensure_events_stream, message_version
from nrt.adapters.bus.replication import replicas_for
from nrt.adapters.metrics import StateMetrics
from nrt.adapters.retry import Backoff, OnRetry, Stopped, retry
from nrt.core.eventlog import AppendResult, Checkpoint, EventLog, RecordedEvent
from nrt.core.events import Event, EventDecodeError, decode

log = logging.getLogger("nrt.cluster_state.recorder")

CONSUMER = "cluster_state"
RETRY_BACKOFF = Backoff(first_s=0.5, max_s=10.0)  # after a failed append, until the batch is recorded
ACK_WAIT_S = 60.0
UNAVAILABLE_PAUSE_S = 0.2  # between fetches while the consumer has no leader
START_WAIT_S = 10.0  # for JetStream to answer at start (a NATS cluster electing its leader)

OnRecorded = Callable[[list[RecordedEvent]], None]
Append = Callable[[list[Event], Checkpoint], Awaitable[AppendResult]]  # the batch and its checkpoint, at once


class Recorder:
    def __init__(
        self,
        nc: Client,
        store: EventLog,
        on_recorded: OnRecorded,
        *,
        consumer: str = CONSUMER,
        batch: int = 1_000,
        poll_s: float = 0.1,
        linger_s: float = 0.05,
        metrics: StateMetrics | None = None,
        append: Append | None = None,  # default: the store's append (cluster_state: the controller's record)
        limits: StreamLimits | None = None,  # applied to the stream at start (None: create it with the defaults)
        may_fetch: Callable[[], bool] = lambda: True,  # cluster_state: while its leader lease runs
        replicas: int | None = None,  # the stream's copies (NRT_NATS_REPLICAS; None: by the NATS cluster's size)
    ) -> None:
        self.metrics = metrics if metrics is not None else StateMetrics()
        self.nc = nc
        self.js: JetStreamContext = nc.jetstream()
        self.store = store
        self.on_recorded = on_recorded
        self.append: Append = append or (lambda events, checkpoint: store.append(events, checkpoint=checkpoint))
        self.consumer = consumer
        self.batch = batch
        self.poll_s = poll_s
        # After a short fetch, wait this long for more before appending: one transaction for a
        # handful of requests' events instead of one per event (the appends are most of our CPU).
        self.linger_s = linger_s
        self.caught_up = asyncio.Event()  # set after the first fetch that finds nothing new
        self.sequence = 0  # the stream sequence of the last message recorded (or before the first to record)
        self.limits = limits
        self.may_fetch = may_fetch
        self.replicas = replicas
        self._lag_warned = False
        self._unavailable = False  # the consumer answered "unavailable" (no leader) at the last fetch
        self.rejected = 0  # events whose subject may not carry their type: never stored
        self.lost = 0  # messages the stream dropped before they were recorded (its limits are too small)
        self._sub: JetStreamContext.PullSubscription | None = None

    async def start(self) -> None:
        await ensure_events_stream(
            self.js,
            limits=self.limits,
            replicas=replicas_for(self.nc, self.replicas),
            update=self.limits is not None,
            wait_s=START_WAIT_S,
        )
        await self._ensure_consumer()
        self._sub = await self.js.pull_subscribe_bind(durable=self.consumer, stream=subjects.EVENTS_STREAM)

    async def stop(self) -> None:
        if self._sub is not None:
            with contextlib.suppress(Exception):
                await self._sub.unsubscribe()
            self._sub = None

    async def _ensure_consumer(self) -> None:
        """(Re)create the durable consumer right after the last sequence the log recorded.

        PostgreSQL is the authority on how far the stream was recorded: the checkpoint is
        committed with the events. Re-positioning the consumer there on every start drops
        whatever a killed predecessor had fetched but not acknowledged, so nothing waits
        for a redelivery that would arrive after newer events.
        """
        checkpoint = await self.store.checkpoint(self.consumer)
        with contextlib.suppress(NotFoundError):
            await self.js.delete_consumer(subjects.EVENTS_STREAM, self.consumer)
        stream = await self.js.stream_info(subjects.EVENTS_STREAM)
        first, last = stream.state.first_seq, stream.state.last_seq
        config = ConsumerConfig(
            durable_name=self.consumer,
            ack_policy=AckPolicy.ALL,  # acknowledging a batch's last message acknowledges the batch
            ack_wait=ACK_WAIT_S,
            max_ack_pending=self.batch * 2,
            filter_subject=subjects.EVENTS_ALL,
        )
        if checkpoint > last:
            # the stream is not the one we recorded (recreated): read all of it; known event ids are skipped
            log.warning(
                "checkpoint %d is past the stream's end (%d): reading the stream from its start", checkpoint, last
            )
            config.deliver_policy = DeliverPolicy.ALL
            self.sequence = max(first - 1, 0)
        elif checkpoint > 0:
            if checkpoint + 1 < first:
                log.error(
                    "stream sequences %d..%d are gone from the stream (its retention limits dropped them before "
                    "they were recorded): they cannot be recorded; raise NRT_EVENTS_STREAM_MAX_MSGS / "
                    "NRT_EVENTS_STREAM_MAX_AGE_S above the longest time cluster_state may be down",
                    checkpoint + 1,
                    first - 1,
                )
            config.deliver_policy = DeliverPolicy.BY_START_SEQUENCE
            config.opt_start_seq = max(checkpoint + 1, first)
            self.sequence = config.opt_start_seq - 1
        else:
            config.deliver_policy = DeliverPolicy.ALL
            self.sequence = max(first - 1, 0)
        await self.js.add_consumer(subjects.EVENTS_STREAM, config)
        log.info(
            "consumer %s reads the stream from sequence %d (log checkpoint %d)",
            self.consumer,
            config.opt_start_seq or first,
            checkpoint,
        )

    async def run(self, stopping: asyncio.Event) -> None:
        assert self._sub is not None, "start() first"
        while not stopping.is_set():
            if not self.may_fetch():
                # A deposed (or paused) leader must not take messages from the durable consumer that its
                # successor has re-created under the same name: an acknowledgement of a later message by the
                # successor would acknowledge them too (AckPolicy.ALL) before any log recorded them.
                await asyncio.sleep(self.poll_s)
                continue
            messages = await self._fetch(self.batch, self.poll_s)
            if not messages:
                self.metrics.positions(self.sequence, self.sequence)  # nothing more in the stream
                self.caught_up.set()
                continue
            if len(messages) < self.batch and self.linger_s > 0:
                await asyncio.sleep(self.linger_s)
            if len(messages) < self.batch and self.linger_s > 0 and self.may_fetch():
                messages += await self._fetch(self.batch - len(messages), self.linger_s)
            if not stopping.is_set():
                with contextlib.suppress(Stopped):
                    record = functools.partial(self._record, messages)
                    await retry(record, RETRY_BACKOFF, _recording_failed(len(messages)), stopping=stopping)
            if len(messages) < self.batch:
                self.caught_up.set()

    async def _fetch(self, batch: int, timeout: float) -> list[Msg]:  # noqa: ASYNC109
        """Up to ``batch`` messages within ``timeout``; none when there are none, or while the consumer has no
        leader (a NATS cluster electing one after a server was lost: seconds): asked again after a pause."""
        assert self._sub is not None, "start() first"
        try:
            messages = await self._sub.fetch(batch, timeout=timeout)
        except TimeoutError:
            return []
        except (ServiceUnavailableError, NoRespondersError) as exc:
            if not self._unavailable:
                log.warning(
                    "the consumer %s is unavailable (%r): a NATS cluster electing its leader; asking again",
                    self.consumer,
                    exc,
                )
            self._unavailable = True
            await asyncio.sleep(UNAVAILABLE_PAUSE_S)
            return []
        if self._unavailable:
            log.info("the consumer %s is available again", self.consumer)
            self._unavailable = False
        return messages

    def _mind_the_limit(self, pending: int) -> None:
        """Warn (once per episode) when the recorder is more than half the stream's message limit behind."""
        limit = self.limits.max_msgs if self.limits is not None else 0
        if not limit:
            return
        if pending > limit // 2 and not self._lag_warned:
            log.warning(
                "the recorder is %d messages behind the stream's end, more than half its limit of %d: events "
                "the stream drops before they are recorded never reach the log",
                pending,
                limit,
            )
        self._lag_warned = pending > limit // 2

    async def _record(self, messages: list[Msg]) -> None:
        stream_messages: list[_StreamMessage] = []
        expected = self.sequence + 1
        for delivered in messages:  # in stream order; a gap is filled from the stream itself
            sequence = delivered.metadata.sequence.stream
            if sequence > expected:
                stream_messages += await self._skipped(expected, sequence)
            stream_messages.append(_StreamMessage.of(delivered))
            expected = max(expected, sequence + 1)
        events: list[Event] = []
        for msg in stream_messages:
            try:
                event = decode(msg.data, message_version(msg.headers))  # an older version is upcast
            except EventDecodeError as exc:
                log.error("not recording the message at stream sequence %d: %s", msg.sequence, exc)
                continue
            if not may_carry(msg.subject, event.type):
                self.rejected += 1
                self.metrics.rejected.inc()
                log.error(
                    "rejected %s %s at stream sequence %d: %s may not carry it (%d rejected since start)",
                    event.type,
                    event.event_id,
                    msg.sequence,
                    msg.subject,
                    self.rejected,
                )
                continue
            events.append(event)
        last = messages[-1].metadata.sequence.stream
        started = time.perf_counter()
        result = await self.append(events, Checkpoint(consumer=self.consumer, sequence=last))
        self.metrics.append.observe(time.perf_counter() - started)
        self.metrics.recorded.inc(len(result.recorded))
        self.sequence = last
        pending = messages[-1].metadata.num_pending
        self.metrics.positions(last + pending, last)  # pending: still in the stream
        self._mind_the_limit(pending)
        await messages[-1].ack()  # and every message before it (AckPolicy.ALL): one ack per batch
        if result.duplicates:
            log.info("skipped %d events already in the log (redelivered)", result.duplicates)
        if result.recorded:
            self.on_recorded(result.recorded)

    async def _skipped(self, start: int, first: int) -> list[_StreamMessage]:
        """The messages from ``start`` to before ``first`` that the consumer did not deliver, read from the stream.

        The consumer skipped them: delivered to someone else (a deposed leader that woke up and fetched from
        the consumer its successor re-created under the same name; it never acknowledges them, and our
        acknowledgement of a later message acknowledges them too), or dropped by the stream's limits, which
        are lost (counted, logged)."""
        stream = await self.js.stream_info(subjects.EVENTS_STREAM)
        found: list[_StreamMessage] = []
        for sequence in range(max(start, stream.state.first_seq), first):
            with contextlib.suppress(NotFoundError):  # deleted: as lost as one the limits dropped
                raw = await self.js.get_msg(subjects.EVENTS_STREAM, sequence)
                found.append(_StreamMessage.read(raw, sequence))
        if found:
            log.warning(
                "read %d message(s) between stream sequences %d and %d from the stream: the consumer had "
                "delivered them elsewhere (a deposed leader's fetch)",
                len(found),
                start,
                first - 1,
            )
        missing = first - start - len(found)
        if missing:
            self.lost += missing
            self.metrics.lost.inc(missing)
            log.error(
                "%d message(s) between stream sequences %d and %d were dropped by the stream's retention limits "
                "before they were recorded: they never reach the log (%d lost since start); raise "
                "NRT_EVENTS_STREAM_MAX_MSGS / NRT_EVENTS_STREAM_MAX_AGE_S",
                missing,
                start,
                first - 1,
                self.lost,
            )
        return found


@dataclass(frozen=True, slots=True)
class _StreamMessage:
    """What recording reads of a message: from the consumer's delivery, or read from the stream by sequence."""

    sequence: int
    subject: str
    data: bytes
    headers: Mapping[str, str] | None

    @classmethod
    def of(cls, msg: Msg) -> _StreamMessage:
        return cls(msg.metadata.sequence.stream, msg.subject, msg.data, msg.headers)

    @classmethod
    def read(cls, raw: RawStreamMsg, sequence: int) -> _StreamMessage:
        return cls(sequence, raw.subject or "", raw.data or b"", raw.headers)


def _recording_failed(events: int) -> OnRetry:
    def logged(_failure: Exception, _failures: int, wait_s: float) -> None:
        log.exception("recording %d events failed; retrying in %.1fs", events, wait_s)

    return logged
