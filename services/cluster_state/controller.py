"""The imperative shell around the policies: feed them, run their commands, remember what was sent.

Everything that changes ``ControlState`` runs synchronously on the event loop (a
recorded event, a heartbeat, a tick, a worker's reply), so the policies always see one
consistent view and deduplicate against every command already sent. Commands run in
background tasks: those sharing a group in order, stopping at the first failure.

Decisions are written once (with ``decisions``, a ``DecisionLog``): the events the policies
decide (an ``Emit`` before any worker command of its group) are appended to the log in the
transaction that records their cause (``record``: the recorder's batch and its checkpoint) or,
for a tick, a sweep, a swap step or a request, in a transaction of their own; they are folded
from that append, and the policies react to them in the same transaction. The outbox relay
publishes them afterwards, so none takes the round trip through the stream before it counts.
A group's worker commands start only once its decisions are committed.
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from datetime import UTC, datetime

from faststream.nats import NatsBroker
from msgspec.structs import replace

from nrt.adapters.bus import broker as bus
from nrt.adapters.bus import subjects
from nrt.adapters.bus.errors import RemoteError
from nrt.adapters.bus.jetstream import EventPublisher
from nrt.adapters.manifest_sources import footprint_of
from nrt.core.eventlog import AppendResult, Checkpoint, DecisionLog, Decisions, RecordedEvent
from nrt.core.events import AnyEvent, Event
from nrt.core.manifest import Manifest, ManifestError, parse_manifest
from nrt.core.policies import (
    Command,
    Control,
    ControlState,
    Emit,
    Refuse,
    Sweep,
    Tick,
    Trigger,
    absorb,
    decide,
    note_reply,
    note_sent,
    saw_gateway,
    saw_heartbeat,
    settle,
    with_footprints,
)
from nrt.core.policies.bookkeeping import control_timeout
from nrt.core.protocol import ControlReply, GatewayHeartbeat, WorkerHeartbeat
from nrt.core.state import ClusterState
from nrt.core.state.stream import StreamSnapshot
from nrt.core.vocabulary import Tier

log = logging.getLogger("nrt.cluster_state")


def utc_now() -> datetime:
    return datetime.now(UTC)


@dataclass
class Outcome:
    """How one group of commands went."""

    group: str
    ok: bool = True
    replies: list[ControlReply] = field(default_factory=list)
    published: list[Event] = field(default_factory=list)
    error: RemoteError | None = None
    refused: Refuse | None = None


@dataclass
class _Writing:
    """One transaction of decisions in progress: how to undo the fold, and who waits for the commit."""

    before: ControlState
    position: int
    seen: int  # the log position the pending decisions were decided at
    decided: list[Event] = field(default_factory=list)  # decided, not yet handed to the store
    written: list[asyncio.Future[None]] = field(default_factory=list)  # resolved when the transaction ends


def split_decisions(commands: Sequence[Command]) -> tuple[dict[str, list[Event]], dict[str, list[Command]]]:
    """Group ``commands`` (one group per ``group``, or per command without one); in each group the
    ``Emit`` commands before its first other command are decisions, written with the transaction;
    the rest run in the group's task once they are committed."""
    groups: dict[str, list[Command]] = {}
    for i, command in enumerate(commands):
        groups.setdefault(command.group or f"#{i}", []).append(command)
    decided: dict[str, list[Event]] = {}
    rest: dict[str, list[Command]] = {}
    for group, members in groups.items():
        lead = 0
        while lead < len(members) and isinstance(members[lead], Emit):
            lead += 1
        decided[group] = [m.event for m in members[:lead] if isinstance(m, Emit)]
        rest[group] = members[lead:]
    return decided, rest


def parse_in_force(text: str, version: int) -> Manifest:
    """The manifest text from the log, parsed, with footprints the catalogue knows filled in."""
    return with_footprints(parse_manifest(text, f"manifest v{version}", footprint_of), footprint_of)


class Controller:
    def __init__(
        self,
        broker: NatsBroker,
        publisher: EventPublisher,
        state: ControlState,
        decisions: DecisionLog | None = None,  # None: decisions are published and folded once recorded
    ) -> None:
        self.broker = broker
        self.publisher = publisher
        self.decisions = decisions
        self.on_decided: Callable[[], None] = lambda: None  # decisions were committed (the relay publishes them)
        # decisions recorded in a transaction of their own, once committed (those that join the recorder's
        # batch reach the recorder's callback with it)
        self.on_decisions_recorded: Callable[[list[RecordedEvent]], None] = lambda _: None
        self.state = state
        self.position = 0  # the log position of the last folded event
        # Where the fold stands on the events stream: every message up to ``stream_sequence`` is in it, and so are
        # the decisions in ``_unechoed``, which the stream carries later (committed, not yet back from it).
        self.stream_sequence = 0
        self._unechoed: dict[str, None] = {}  # event ids, in the order they were decided
        self.acting = False  # policies run on new events only once the backlog is folded
        self.leading: Callable[[], bool] = lambda: True  # and only while this instance's leader lease runs
        self._manifest: Manifest | None = None
        self._manifest_digest: str | None = None
        self._waiters: list[tuple[Callable[[ClusterState], bool], asyncio.Future[ClusterState]]] = []
        self._tasks: set[asyncio.Task[Outcome]] = set()
        self._refusals: dict[tuple[str, str], str] = {}
        self._writing: _Writing | None = None
        self._deciding = False  # inside the store's callback: decisions join the transaction in progress
        self._write_lock = asyncio.Lock()  # one transaction of decisions at a time
        self._writers: set[asyncio.Task[None]] = set()

    # -- the view ----------------------------------------------------------------------------

    @property
    def cluster(self) -> ClusterState:
        return self.state.cluster

    @property
    def manifest(self) -> Manifest | None:
        """The manifest in force, parsed once per version."""
        cluster = self.state.cluster
        if cluster.manifest_text is None:
            return None
        if cluster.manifest_digest != self._manifest_digest:
            try:
                self._manifest = parse_in_force(cluster.manifest_text, cluster.manifest_version)
            except ManifestError as exc:  # a log written by another version; keep acting on the last good one
                log.error("the manifest in force (v%d) does not parse: %s", cluster.manifest_version, exc)
            self._manifest_digest = cluster.manifest_digest
        return self._manifest

    def on_recorded(self, recorded: list[RecordedEvent]) -> None:
        """Fold freshly recorded events and let the policies react to each."""
        self._fold(recorded)
        self._notify()

    def _fold(self, recorded: list[RecordedEvent]) -> None:
        """Fold each of ``recorded`` and, once acting, let the policies react to it."""
        for record in recorded:
            now = utc_now()
            self.state = absorb(self.state, record.event, now)
            self.position = record.position
            if self.acting and self.leading():
                self.react(record.event, now)

    def rebuild(self, position: int, event: AnyEvent, now: datetime) -> None:
        """Fold one event of the log as it is at start, without acting on history."""
        self.state = absorb(self.state, event, now)
        self.position = position

    def restore(self, position: int, cluster: ClusterState) -> None:
        """Start from ``cluster``, the fold of the log up to ``position`` (a snapshot), before any event."""
        self.state = replace(self.state, cluster=cluster)
        self.position = position

    def resume_stream(self, sequence: int, unpublished: Sequence[str]) -> None:
        """At start, before the recorder runs: the fold holds the stream up to ``sequence`` and the decisions
        ``unpublished`` (the outbox) that the stream does not carry yet."""
        self.stream_sequence = sequence
        self._unechoed = dict.fromkeys(unpublished)

    async def stream_snapshot(self) -> StreamSnapshot:
        """The fold placed on the events stream (``nrt.state.snapshot``), between two transactions: every
        message up to ``sequence`` is in it, and so are the decisions the stream carries after it."""
        async with self._write_lock:
            return StreamSnapshot(
                state=self.state.cluster,
                position=self.position,
                sequence=self.stream_sequence,
                ahead=tuple(self._unechoed),
            )

    def _echoed(self, causes: Sequence[Event], checkpoint: Checkpoint | None, decided: list[RecordedEvent]) -> None:
        """A transaction committed: the stream's messages up to ``checkpoint`` are in the fold (decisions among
        ``causes`` are back from the stream), and so are the new ``decided``, which the stream carries later."""
        for event in causes:
            self._unechoed.pop(event.event_id, None)
        if checkpoint is not None:
            self.stream_sequence = checkpoint.sequence
        for record in decided:
            self._unechoed[record.event.event_id] = None

    def _notify(self) -> None:
        cluster = self.state.cluster
        for waiter in list(self._waiters):
            predicate, future = waiter
            if future.done() or predicate(cluster):
                self._waiters.remove(waiter)
                if not future.done():
                    future.set_result(cluster)

    async def wait_for(self, predicate: Callable[[ClusterState], bool], within: float) -> ClusterState:
        """Wait until the folded state satisfies ``predicate``; TimeoutError after ``within`` seconds."""
        if predicate(self.state.cluster):
            return self.state.cluster
        future: asyncio.Future[ClusterState] = asyncio.get_running_loop().create_future()
        waiter = (predicate, future)
        self._waiters.append(waiter)
        try:
            return await asyncio.wait_for(future, within)
        finally:
            if waiter in self._waiters:
                self._waiters.remove(waiter)

    # -- inputs --------------------------------------------------------------------------------

    def react(self, trigger: Trigger, now: datetime | None = None) -> dict[str, asyncio.Task[Outcome]]:
        now = now or utc_now()
        commands = decide(self.state, self.manifest, trigger, now)
        return self.execute(commands, now)

    async def on_heartbeat(self, beat: WorkerHeartbeat) -> None:
        """A worker's liveness, resources and hosted models (every few seconds)."""
        self.state = saw_heartbeat(self.state, beat, utc_now())

    async def on_gateway_heartbeat(self, beat: GatewayHeartbeat) -> None:
        """A gateway is alive: the requests it admitted have an owner."""
        self.state = saw_gateway(self.state, beat, utc_now())

    def listening(self, now: datetime | None = None) -> None:
        """Heartbeats can reach this controller from ``now`` on (its subscription is in place, or its
        connection is back): liveness counts missed beats from here."""
        self.state = replace(self.state, started_at=now or utc_now())

    def tick(self) -> None:
        now = utc_now()
        self.state = settle(self.state, now)
        self.react(Tick(), now)

    def sweep(self) -> None:
        self.react(Sweep())

    # -- running commands ----------------------------------------------------------------------

    def execute(self, commands: Sequence[Command], now: datetime | None = None) -> dict[str, asyncio.Task[Outcome]]:
        """Record ``commands`` as pending and start them; one task per group (see ``split_decisions``)."""
        if not commands:
            return {}
        self.state = note_sent(self.state, commands, now or utc_now())
        if self.decisions is None:
            decided: dict[str, list[Event]] = {}
            groups: dict[str, list[Command]] = {}
            for i, command in enumerate(commands):
                groups.setdefault(command.group or f"#{i}", []).append(command)
        else:
            decided, groups = split_decisions(commands)
        written: asyncio.Future[None] | None = None
        events = [event for group in decided.values() for event in group]
        if events:
            written = asyncio.get_running_loop().create_future()
            if self._writing is not None and self._deciding:  # reacting inside a transaction: these join it
                self._writing.decided += events
                self._writing.written.append(written)
            else:
                write = self._write(events, written, seen=self.position)
                writer = asyncio.create_task(write, name="cluster_state decisions")
                self._writers.add(writer)
                writer.add_done_callback(self._writers.discard)
        tasks = {}
        for group, members in groups.items():
            run = self._run_group(group, members, written, decided.get(group, []))
            task = asyncio.create_task(run, name=f"cluster_state {group}")
            self._tasks.add(task)
            task.add_done_callback(self._tasks.discard)
            tasks[group] = task
        return tasks

    async def decide(self, events: Sequence[Event]) -> None:
        """Record ``events`` as this service's decisions now (a key, the bootstrap manifest) and fold them;
        without a decision log, publish them and wait for nothing."""
        if self.decisions is None:
            for event in events:
                await self.publisher.publish(event)
            return
        written = asyncio.get_running_loop().create_future()
        await self._write(list(events), written, seen=self.position)
        await written

    # -- writing decisions -----------------------------------------------------------------------

    async def record(self, causes: Sequence[Event], checkpoint: Checkpoint | None = None) -> AppendResult:
        """Append ``causes`` (the recorder's batch) with every decision they lead to and ``checkpoint``, in one
        transaction; folded and acted on once committed. Everything newly recorded comes back."""
        assert self.decisions is not None, "record() needs a decision log"
        async with self._write_lock:
            self._writing = _Writing(before=self.state, position=self.position, seen=self.position)
            try:
                result = await self.decisions.append_decided(causes, self._decide, checkpoint)
            except BaseException as exc:
                self._abandon(exc)
                raise
            self._echoed(causes, checkpoint, result.decided)
            self._committed(bool(result.decided))
        head = result.decided[-1].position if result.decided else result.causes.head
        return AppendResult(recorded=result.recorded, duplicates=result.causes.duplicates, head=head)

    async def _write(self, events: list[Event], written: asyncio.Future[None], seen: int) -> None:
        """Decisions made outside a transaction (a tick, a swap step, a request) on the log as folded up to
        ``seen``: a transaction of their own."""
        assert self.decisions is not None
        async with self._write_lock:
            self._writing = _Writing(before=self.state, position=self.position, seen=seen, decided=events)
            self._writing.written.append(written)
            try:
                result = await self.decisions.append_decided([], self._decide)
            except Exception as exc:
                log.warning("%d decision(s) not recorded: %s", len(events), exc)
                self._abandon(exc)
                return
            except BaseException as exc:
                self._abandon(exc)
                raise
            self._echoed((), None, result.decided)
            self._committed(bool(result.decided))
        self.on_decisions_recorded(result.decided)

    def _decide(self, recorded: list[RecordedEvent]) -> Decisions:
        """The store's callback inside the transaction: fold what it recorded, react, hand back the decisions."""
        writing = self._writing
        assert writing is not None
        self._deciding = True  # what the policies decide now joins this transaction
        try:
            self._fold(recorded)
        finally:
            self._deciding = False
        if recorded:
            writing.seen = self.position
        events, writing.decided = writing.decided, []
        return Decisions(events, writing.seen)

    def _committed(self, decided: bool) -> None:
        writing, self._writing = self._writing, None
        assert writing is not None
        for future in writing.written:
            if not future.done():
                future.set_result(None)
        if decided:
            self.on_decided()
        self._notify()

    def _abandon(self, exc: BaseException) -> None:
        """The transaction failed: nothing it folded is in the log; undo the fold, fail who waited for it.

        What was heard meanwhile stays: the heartbeats of workers and gateways and since when we hear them are
        observations, not the transaction's; put back, a transaction that hung (a database frozen, a session
        ended by the server) would make them look silent for as long as it hung."""
        writing, self._writing = self._writing, None
        assert writing is not None
        heard = self.state
        self.state = replace(writing.before, seen=heard.seen, gateways=heard.gateways, started_at=heard.started_at)
        self.position = writing.position
        for future in writing.written:
            if future.done():
                continue
            if isinstance(exc, Exception):
                future.set_exception(exc)
            else:
                future.cancel()

    async def _run_group(
        self, group: str, commands: list[Command], written: asyncio.Future[None] | None, decided: list[Event]
    ) -> Outcome:
        outcome = Outcome(group=group)
        if written is not None:
            try:
                await asyncio.shield(written)
            except Exception as exc:
                outcome.ok, outcome.error = False, RemoteError("decision_not_recorded", str(exc), 503)
                return outcome
            outcome.published += decided
        for command in commands:
            if isinstance(command, Refuse):
                self._log_refusal(command)
                outcome.ok, outcome.refused = False, command
                break
            if isinstance(command, Emit):
                try:
                    await self.publisher.publish(command.event)
                except Exception as exc:
                    log.error("could not publish %s: %s", command.event.type, exc)
                    outcome.ok, outcome.error = False, RemoteError("publish_failed", str(exc), 503)
                    break
                outcome.published.append(command.event)
                continue
            reply = await self._control(command)
            if isinstance(reply, RemoteError):
                outcome.ok, outcome.error = False, reply
                break
            outcome.replies.append(reply)
            if self.decisions is not None and reply.changed and command.tier is not None:
                await self._until_logged(command.worker_id, reply)
        return outcome

    async def _until_logged(self, worker_id: str, reply: ControlReply) -> None:
        """Wait (up to ``settle_s``) for the worker's event of the change it reported to be folded, so that what
        the group does next — a decision written at once — follows it in the log, as it follows it in time."""

        def shown(cluster: ClusterState) -> bool:
            model = cluster.models.get(reply.model_id)
            placement = model.placements.get(worker_id) if model is not None else None
            return (placement.tier if placement is not None else Tier.UNLOADED) == reply.tier

        try:
            await self.wait_for(shown, within=self.state.tuning.settle_s)
        except TimeoutError:
            log.warning(
                "%s on %s: the log did not show it %s within %.0fs",
                reply.model_id,
                worker_id,
                reply.tier,
                self.state.tuning.settle_s,
            )

    async def _control(self, control: Control) -> ControlReply | RemoteError:
        command = control.command
        try:
            reply = await bus.call(
                self.broker, subjects.control(control.worker_id), command, ControlReply, control_timeout(control)
            )
        except RemoteError as exc:
            log.warning(
                "%s %s on %s failed: %s", command.action, command.session_id or command.model_id, control.worker_id, exc
            )
            self.state = note_reply(self.state, control, ok=False, now=utc_now())
            return exc
        log.info(
            "%s %s on %s: %s in %.0f ms",
            command.action,
            command.session_id or command.model_id,
            control.worker_id,
            reply.tier,
            reply.elapsed_ms,
        )
        self.state = note_reply(self.state, control, ok=True, now=utc_now())
        return reply

    def _log_refusal(self, refusal: Refuse) -> None:
        key = (refusal.model_id, refusal.code)
        if self._refusals.get(key) != refusal.reason:  # say it once, not every tick
            self._refusals[key] = refusal.reason
            log.warning("%s: %s", refusal.code, refusal.reason)

    async def settle_tasks(self) -> None:
        """Wait for every command task started so far (tests, shutdown)."""
        while self._tasks:
            await asyncio.gather(*list(self._tasks), return_exceptions=True)

    def cancel(self) -> None:
        for task in [*self._tasks, *self._writers]:
            task.cancel()
