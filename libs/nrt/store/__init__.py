"""The PostgreSQL event store."""

from nrt.store.event_store import (
    AppendResult,
    ChainReport,
    Checkpoint,
    ConcurrencyError,
    EventStore,
    RecordedEvent,
)
from nrt.store.migrate import upgrade

__all__ = [
    "AppendResult",
    "ChainReport",
    "Checkpoint",
    "ConcurrencyError",
    "EventStore",
    "RecordedEvent",
    "upgrade",
]
