"""The hash chain: each row's hash covers the previous hash and the row's canonical content.

Every event store links its rows with ``link`` and checks them with ``ChainVerifier``, so
the chain is computed and verified one way whatever holds the rows.
"""

from __future__ import annotations

import hashlib
from collections.abc import AsyncIterable, Sequence
from typing import NamedTuple

from nrt.core.eventlog.records import ChainReport, ChainRow
from nrt.core.events import Event, encode

GENESIS = bytes(32)


def row_hash(prev_hash: bytes, position: int, stream_id: str, stream_version: int, body: bytes) -> bytes:
    digest = hashlib.sha256(prev_hash)
    digest.update(position.to_bytes(8, "big"))
    digest.update(stream_id.encode())
    digest.update(b"\x00")
    digest.update(stream_version.to_bytes(8, "big"))
    digest.update(body)
    return digest.digest()


class Link(NamedTuple):
    """One event as a row of the chain."""

    event: Event
    position: int
    stream_id: str
    stream_version: int
    body: bytes  # the canonical encoding (nrt.core.events.encode)
    prev_hash: bytes
    hash: bytes


def link(events: Sequence[Event], versions: dict[str, int], head: int, prev_hash: bytes) -> list[Link]:
    """``events`` chained after the row at ``head`` whose hash is ``prev_hash``.

    Positions follow ``head`` without a gap; each event's stream version follows the
    stream's current one in ``versions`` (absent: 0), which is advanced in place.
    """
    links: list[Link] = []
    for position, event in enumerate(events, start=head + 1):
        stream_id = event.stream_id
        version = versions.get(stream_id, 0) + 1
        versions[stream_id] = version
        body = encode(event)
        digest = row_hash(prev_hash, position, stream_id, version, body)
        links.append(Link(event, position, stream_id, version, body, prev_hash, digest))
        prev_hash = digest
    return links


class ChainVerifier:
    """Recompute the chain from the first row: feed the stored rows in position order."""

    def __init__(self, next_position: int = 1, prev_hash: bytes = GENESIS) -> None:
        """From the first row, or (an excerpt) from ``next_position`` whose row follows ``prev_hash``."""
        self.prev_hash = prev_hash
        self.next_position = next_position  # the position the next row must have
        self.checked = 0

    def check(
        self,
        position: int,
        event_id: str,
        stream_id: str,
        stream_version: int,
        body: bytes,
        stored_prev_hash: bytes,
        stored_hash: bytes,
    ) -> ChainReport | None:
        """None while the chain holds; else the report naming the first broken row."""
        if position != self.next_position:
            return self._broken(
                self.next_position,
                event_id,
                f"row {self.next_position} is missing (next row is {position}): a row was deleted",
            )
        if stored_prev_hash != self.prev_hash:
            return self._broken(position, event_id, "its prev_hash does not match the previous row's hash")
        digest = row_hash(self.prev_hash, position, stream_id, stream_version, body)
        if digest != stored_hash:
            return self._broken(position, event_id, "its content does not match its hash: the row was modified")
        self.prev_hash, self.next_position, self.checked = digest, position + 1, self.checked + 1
        return None

    def intact(self) -> ChainReport:
        return ChainReport(ok=True, checked=self.checked)

    def _broken(self, position: int, event_id: str, reason: str) -> ChainReport:
        return ChainReport(
            ok=False, checked=self.checked, first_bad_position=position, event_id=event_id, reason=reason
        )


async def verify_rows(rows: AsyncIterable[ChainRow]) -> ChainReport:
    """Recompute the chain over ``rows`` (the log's rows from the first, in position order)."""
    verifier = ChainVerifier()
    async for row in rows:
        broken = verifier.check(
            row.position, row.event_id, row.stream_id, row.stream_version, row.body, row.prev_hash, row.hash
        )
        if broken is not None:
            return broken
    return verifier.intact()
