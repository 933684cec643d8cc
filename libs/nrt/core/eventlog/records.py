"""What an event store hands back: recorded events, append results, checkpoints, chain reports.

Plain data shared by every implementation of ``nrt.core.eventlog.interface.EventLog`` (PostgreSQL
and in memory); nothing here touches a database.
"""

from __future__ import annotations

from datetime import datetime

import msgspec

from nrt.core.events import AnyEvent


class ConcurrencyError(Exception):
    """An append expected a stream version that another writer has already moved past."""

    def __init__(self, stream_id: str, expected: int, actual: int) -> None:
        self.stream_id, self.expected, self.actual = stream_id, expected, actual
        super().__init__(
            f"stream '{stream_id}' is at version {actual}, but the append expected version {expected}; "
            "re-read the stream and retry"
        )


class RecordedEvent(msgspec.Struct, frozen=True, kw_only=True):
    position: int
    stream_id: str
    stream_version: int
    recorded_at: datetime | None  # None in an append's result when the store sets it itself (PostgreSQL)
    event: AnyEvent


ReplayedEvent = tuple[int, AnyEvent]  # (position, event): what a fold needs


class AppendResult(msgspec.Struct, frozen=True, kw_only=True):
    recorded: list[RecordedEvent]  # newly stored, in position order
    duplicates: int  # events skipped because their id was already stored
    head: int  # the log's last position after the append


class Checkpoint(msgspec.Struct, frozen=True, kw_only=True):
    """How far a consumer has recorded its source (e.g. a JetStream stream sequence)."""

    consumer: str
    sequence: int


class ChainRow(msgspec.Struct, frozen=True, kw_only=True):
    """One row as the hash chain covers it: what an export carries and an offline check recomputes."""

    position: int
    event_id: str
    stream_id: str
    stream_version: int
    body: bytes  # the canonical encoding the hash covers
    prev_hash: bytes
    hash: bytes


class Snapshot(msgspec.Struct, frozen=True, kw_only=True):
    """A folded state of the log at ``position``: what a reader starts from instead of position 1.

    ``state`` is the encoded state (the store does not interpret it), ``fold_version`` the
    version of the fold and encoding that produced it (a reader ignores other versions), and
    ``chain_hash`` the hash of the log's row at ``position``, so a snapshot names the exact
    log it was folded from.
    """

    position: int
    fold_version: int
    state: bytes
    chain_hash: bytes
    created_at: datetime | None = None  # set by the store


class ChainReport(msgspec.Struct, frozen=True, kw_only=True):
    ok: bool
    checked: int
    first_bad_position: int | None = None
    event_id: str | None = None
    reason: str | None = None

    def render(self) -> str:
        if self.ok:
            return f"hash chain intact: {self.checked} events verified"
        return f"hash chain broken at position {self.first_bad_position} (event {self.event_id}): {self.reason}"
