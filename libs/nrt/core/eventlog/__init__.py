"""The event log as the core sees it: the ``EventLog`` interface, its records, decided appends,
the hash chain, the JSON Lines export, and the leadership (lease and fencing epoch) of its writer.

Plain data and pure functions over ``nrt.core.events``; nothing here touches a database. The
stores that implement the interface are adapters: ``nrt.adapters.store.InMemoryEventStore`` and
PostgreSQL's ``nrt.adapters.store.EventStore``. Both pass the same contract tests
(``tests/integration/store/test_contract.py``).
"""

from nrt.core.eventlog.decisions import Decide, DecidedAppend, DecisionLog, Decisions, OutboxEntry
from nrt.core.eventlog.interface import EventLog
from nrt.core.eventlog.leadership import Fenced, Lease, LeaseError, LeaseStore, LeaseTerms, Renewal, Tenure, Verdict
from nrt.core.eventlog.records import (
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
    "Fenced",
    "Lease",
    "LeaseError",
    "LeaseStore",
    "LeaseTerms",
    "OutboxEntry",
    "RecordedEvent",
    "Renewal",
    "ReplayedEvent",
    "Snapshot",
    "Tenure",
    "Verdict",
]
