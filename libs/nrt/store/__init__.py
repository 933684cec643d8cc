"""The event store: the ``EventLog`` interface, PostgreSQL's ``EventStore`` and ``InMemoryEventStore``."""

from nrt.store.decisions import Decide, DecidedAppend, DecisionLog, Decisions, OutboxEntry
from nrt.store.event_store import EventStore
from nrt.store.interface import EventLog
from nrt.store.memory import InMemoryEventStore
from nrt.store.migrate import upgrade
from nrt.store.records import (
    AppendResult,
    ChainReport,
    ChainRow,
    Checkpoint,
    ConcurrencyError,
    RecordedEvent,
    ReplayedEvent,
    Snapshot,
)

__all__ = [
    "AppendResult",
    "ChainReport",
    "ChainRow",
    "Checkpoint",
    "ConcurrencyError",
    "Decide",
    "DecidedAppend",
    "DecisionLog",
    "Decisions",
    "EventLog",
    "EventStore",
    "InMemoryEventStore",
    "OutboxEntry",
    "RecordedEvent",
    "ReplayedEvent",
    "Snapshot",
    "upgrade",
]
