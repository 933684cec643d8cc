"""cluster_state's snapshots: start from the latest one, and write new ones off the hot path.

At start the controller takes the latest usable snapshot (``nrt.core.state.snapshot``) and folds
only the log after it. While serving, ``SnapshotWriter`` checks every ``check_s`` whether
``every_events`` events have been folded since the last snapshot, or ``every_s`` seconds have
passed with any new event, and then stores the state the controller has folded (the state
and its position are read together, between two folds).
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import time
from datetime import datetime

from cluster_state.controller import Controller
from nrt.core.eventlog import EventLog
from nrt.core.state import snapshot

log = logging.getLogger("nrt.cluster_state.snapshots")


async def rebuild(store: EventLog, controller: Controller, now: datetime) -> tuple[int, int]:
    """Fold the log into ``controller`` from its latest snapshot; ``(snapshot position, events folded after it)``."""
    position, cluster = await snapshot.load(store)
    if position:
        controller.restore(position, cluster)
    folded = 0
    async for at, event in store.replay(controller.position + 1):
        controller.rebuild(at, event, now)
        folded += 1
    return position, folded


class SnapshotWriter:
    def __init__(
        self, store: EventLog, controller: Controller, *, every_events: int, every_s: float, check_s: float = 1.0
    ) -> None:
        self.store = store
        self.controller = controller
        self.every_events = every_events
        self.every_s = every_s
        self.check_s = min(check_s, every_s)
        self.position = controller.position  # the position of the last snapshot (or of the start)
        self._saved_at = time.monotonic()

    def due(self) -> bool:
        behind = self.controller.position - self.position
        return behind >= self.every_events or (behind > 0 and time.monotonic() - self._saved_at >= self.every_s)

    async def save(self) -> None:
        """Store the controller's state at its position now."""
        position, cluster = self.controller.position, self.controller.cluster  # no await between: one pair
        if position <= self.position:
            return
        started = time.perf_counter()
        encoded = await asyncio.to_thread(snapshot.encode_state, cluster)  # immutable: safe off the event loop
        await self.store.save_snapshot(position, snapshot.FOLD_VERSION, encoded)
        self.position, self._saved_at = position, time.monotonic()
        log.info("snapshot at position %d in %.0f ms", position, (time.perf_counter() - started) * 1e3)

    async def run(self, stopping: asyncio.Event) -> None:
        while not stopping.is_set():
            with contextlib.suppress(TimeoutError):
                await asyncio.wait_for(stopping.wait(), self.check_s)
            if self.due():
                try:
                    await self.save()
                except Exception:
                    log.exception("saving a snapshot failed; retrying at the next check")
