"""Exports of the log: JSON Lines, one row per line with its hashes, checkable offline.

Each line is ``{"position", "event_id", "stream_id", "stream_version", "body", "prev_hash", "hash"}``:
``body`` is the canonical encoding the hash covers, as text (so the exact bytes survive), and the
hashes are hex. ``verify_lines`` recomputes the chain from the first line: from the genesis when the
export starts at position 1, else from that line's ``prev_hash`` (an excerpt proves its own rows and
their links, and that they follow a row with that hash).
"""

from __future__ import annotations

from collections.abc import AsyncIterator, Iterable

import msgspec

from nrt.core.eventlog.hashchain import ChainVerifier
from nrt.core.eventlog.records import ChainReport, ChainRow


class ExportLine(msgspec.Struct, frozen=True, kw_only=True, forbid_unknown_fields=True):
    position: int
    event_id: str
    stream_id: str
    stream_version: int
    body: str
    prev_hash: str
    hash: str


_encoder = msgspec.json.Encoder()
_decoder = msgspec.json.Decoder(ExportLine)


def export_line(row: ChainRow) -> bytes:
    """The row as one line of an export (with its newline)."""
    line = ExportLine(
        position=row.position,
        event_id=row.event_id,
        stream_id=row.stream_id,
        stream_version=row.stream_version,
        body=row.body.decode(),
        prev_hash=row.prev_hash.hex(),
        hash=row.hash.hex(),
    )
    return _encoder.encode(line) + b"\n"


async def export_lines(rows: AsyncIterator[ChainRow]) -> AsyncIterator[bytes]:
    async for row in rows:
        yield export_line(row)


def verify_lines(lines: Iterable[bytes | str]) -> ChainReport:
    """Recompute the chain over an export's lines; name the first line that does not match."""
    verifier: ChainVerifier | None = None
    for number, raw in enumerate(lines, start=1):
        if not raw.strip():
            continue
        try:
            line = _decoder.decode(raw)
            prev_hash, digest = bytes.fromhex(line.prev_hash), bytes.fromhex(line.hash)
        except (msgspec.DecodeError, ValueError) as exc:
            checked = verifier.checked if verifier is not None else 0
            return ChainReport(ok=False, checked=checked, reason=f"line {number} is not an export line: {exc}")
        if verifier is None:
            verifier = ChainVerifier(line.position, prev_hash)
        broken = verifier.check(
            line.position,
            line.event_id,
            line.stream_id,
            line.stream_version,
            line.body.encode(),
            prev_hash,
            digest,
        )
        if broken is not None:
            return broken
    return verifier.intact() if verifier is not None else ChainReport(ok=True, checked=0)
