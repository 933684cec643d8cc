"""Decisions written once: the events a decider derives from the log, appended with their cause.

cluster_state decides events (placements, tier commands, swap steps, liveness) by folding the
log. ``DecisionLog.append_decided`` appends a batch of causes (events from the stream, possibly
none), calls the decider on what it recorded, appends what the decider returns with expected
stream versions, lets the decider react to those in turn, and stores the consumer's checkpoint:
all in one transaction. Each decided event also gets a row in the outbox; a relay publishes the
outbox to the stream (the event id is the message id) and then clears those rows. A crash
between the commit and the publish leaves the rows for the next relay: nothing is lost, and a
re-publish is dropped by the stream's duplicate window and skipped by the log's event id.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import NamedTuple, Protocol

import msgspec

from nrt.core.eventlog.interface import EventLog
from nrt.core.eventlog.records import AppendResult, Checkpoint, RecordedEvent
from nrt.core.events import Event

MAX_ROUNDS = 32  # decisions reacting to decisions: a decider that never settles is a bug, not a log


class Decisions(NamedTuple):
    """What a decider appends: ``events``, decided on the log as folded up to position ``seen``.

    Each event's stream must still be at the version it had at ``seen`` (the decider saw no
    later event of it), or the append raises ConcurrencyError and stores nothing."""

    events: Sequence[Event]
    seen: int


Decide = Callable[[list[RecordedEvent]], Decisions]  # called inside the transaction; pure apart from its own state


class DecidedAppend(msgspec.Struct, frozen=True, kw_only=True):
    causes: AppendResult  # the batch as appended (duplicates skipped)
    decided: list[RecordedEvent]  # the decisions recorded, in position order (each with an outbox row)

    @property
    def recorded(self) -> list[RecordedEvent]:
        """Everything newly in the log, in position order."""
        return [*self.causes.recorded, *self.decided]


class OutboxEntry(msgspec.Struct, frozen=True, kw_only=True):
    """A decided event waiting to be published: its stored bytes and the version that wrote them."""

    position: int
    event_id: str
    type: str
    schema_version: int
    body: bytes


class DecisionLog(EventLog, Protocol):
    async def append_decided(
        self, causes: Sequence[Event], decide: Decide, checkpoint: Checkpoint | None = None
    ) -> DecidedAppend:
        """Append ``causes``, then the decisions ``decide`` derives (round after round, until it
        returns none), each with an outbox row, and ``checkpoint``: atomically. An exception from
        ``decide`` or a ConcurrencyError stores nothing."""
        ...

    async def unpublished(self, limit: int = 500) -> list[OutboxEntry]:
        """The outbox: decided events not yet published, by position."""
        ...

    async def mark_published(self, positions: Sequence[int]) -> None:
        """The stream has these decided events: clear their outbox rows."""
        ...


def too_many_rounds() -> RuntimeError:
    return RuntimeError(f"the decider was still deciding after {MAX_ROUNDS} rounds; nothing was stored")
