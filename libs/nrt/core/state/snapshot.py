"""Snapshots of the folded ClusterState: encode, decode, and fold the log from the latest one.

A snapshot is the fold of the log up to a position (``nrt.adapters.store.Snapshot``). Readers start
from the latest snapshot at or before their target and fold only the events after it, so
their cost follows the events since the snapshot, not the length of the log.

``FOLD_VERSION`` names the fold and this encoding: change it whenever ``evolve`` or
``ClusterState`` changes what a log folds to, and every older snapshot is ignored (readers
fold from an older matching one, or from position 1).
"""

from __future__ import annotations

import msgspec

from nrt.core.eventlog import EventLog, Snapshot
from nrt.core.state.fold import evolve
from nrt.core.state.model import ClusterState

# 2: workers carry their device (WorkerJoined v3); 3: models their load failures (TierChanged v2);
# 4: requests in flight their gateway (RequestAdmitted v4, admitted_by)
FOLD_VERSION = 4

_encoder = msgspec.msgpack.Encoder(order="deterministic")  # one state, one encoding (audits compare bytes)
_decoder = msgspec.msgpack.Decoder(ClusterState)


def encode_state(state: ClusterState) -> bytes:
    return _encoder.encode(state)


def decode_state(data: bytes) -> ClusterState:
    """The state a snapshot holds; msgspec.DecodeError when the bytes are not one."""
    return _decoder.decode(data)


async def save(log: EventLog, position: int, state: ClusterState) -> Snapshot:
    """Store ``state`` as the fold of ``log`` up to ``position``."""
    return await log.save_snapshot(position, FOLD_VERSION, encode_state(state))


async def load(log: EventLog, at_or_before: int | None = None) -> tuple[int, ClusterState]:
    """The latest usable snapshot at or before ``at_or_before`` as ``(position, state)``; ``(0, empty)``
    when there is none."""
    snapshot = await log.latest_snapshot(FOLD_VERSION, at_or_before)
    if snapshot is None:
        return 0, ClusterState()
    return snapshot.position, decode_state(snapshot.state)


async def fold_log(log: EventLog, end: int | None = None) -> tuple[int, ClusterState]:
    """The state the log folds to at ``end`` (the head when None): the latest snapshot at or before it,
    then the events after it. Returns ``(position of the last folded event, state)``."""
    position, state = await load(log, end)
    if end is None or position < end:
        async for at, event in log.replay(position + 1, end):
            state, position = evolve(state, event), at
    return position, state


class SnapshotReport(msgspec.Struct, frozen=True, kw_only=True):
    """Each snapshot checked against a fold of the log up to its position."""

    ok: bool
    checked: int  # snapshots of FOLD_VERSION compared with the fold
    skipped: int  # snapshots of other fold versions (readers ignore them)
    first_bad_position: int | None = None
    reason: str | None = None

    def render(self) -> str:
        skipped = f" ({self.skipped} of another fold version skipped)" if self.skipped else ""
        if self.ok:
            return f"snapshots intact: {self.checked} match a fold of the log{skipped}"
        return f"snapshot at position {self.first_bad_position} is wrong: {self.reason}"


async def verify_snapshots(log: EventLog, page: int = 10_000) -> SnapshotReport:
    """Fold the log once from position 1 and compare every snapshot of ``FOLD_VERSION`` on the way:
    its chain hash with the row's hash, its state with the fold (name the first that differs)."""
    stored = await log.snapshots()
    mine = [s for s in stored if s.fold_version == FOLD_VERSION]
    skipped = len(stored) - len(mine)
    if not mine:
        return SnapshotReport(ok=True, checked=0, skipped=skipped)
    state, checked, index = ClusterState(), 0, 0
    async for position, event in log.replay(1, mine[-1].position, page=page):
        state = evolve(state, event)
        while index < len(mine) and mine[index].position == position:
            problem = await _compare(log, mine[index], state)
            if problem is not None:
                return SnapshotReport(
                    ok=False, checked=checked, skipped=skipped, first_bad_position=position, reason=problem
                )
            checked, index = checked + 1, index + 1
    if index < len(mine):
        return SnapshotReport(
            ok=False,
            checked=checked,
            skipped=skipped,
            first_bad_position=mine[index].position,
            reason="the log has no row at its position",
        )
    return SnapshotReport(ok=True, checked=checked, skipped=skipped)


async def _compare(log: EventLog, snapshot: Snapshot, state: ClusterState) -> str | None:
    try:
        stored = decode_state(snapshot.state)
    except msgspec.DecodeError as exc:
        return f"its state does not decode ({exc})"
    if stored != state:
        return "its state differs from the fold of the log up to its position"
    usable = await log.latest_snapshot(snapshot.fold_version, snapshot.position)
    if usable is None or usable.position != snapshot.position:
        return "its chain hash is not the hash of the log's row at its position"
    return None
