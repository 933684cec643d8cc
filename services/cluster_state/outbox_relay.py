"""The outbox relay: publish cluster_state's recorded decisions to the event stream, then clear them.

``Controller`` appends its decisions with an outbox row each (``nrt.core.eventlog.decisions``). The relay
sends the outbox in position order — the stored bytes, the event id as the message id, the
stored schema version as the version header — waits for the stream's acknowledgements, and only
then clears the rows. Killed before the publish, the rows wait for the next start; killed after
it and before the clear, the next start sends them again and JetStream drops the repeated message
ids (the recorder would skip them by event id anyway). It wakes when decisions are committed, and
polls every ``poll_s`` in case a wake-up was missed.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging

from nats.aio.client import Client

from nrt.adapters.bus.jetstream import event_subject
from nrt.adapters.retry import Backoff, Stopped, retry
from nrt.core.eventlog import DecisionLog, OutboxEntry
from nrt.core.events import VERSION_HEADER

log = logging.getLogger("nrt.cluster_state.relay")

RETRY_BACKOFF = Backoff(first_s=0.5, max_s=10.0)  # after a failed publish, until the outbox is sent


class OutboxRelay:
    def __init__(self, nc: Client, store: DecisionLog, *, poll_s: float = 1.0, batch: int = 500) -> None:
        self.js = nc.jetstream(timeout=5.0)
        self.store = store
        self.poll_s = poll_s
        self.batch = batch
        self.published = 0  # decisions acknowledged by the stream since start
        self._wake = asyncio.Event()

    def notify(self) -> None:
        """Decisions were committed: publish them now."""
        self._wake.set()

    async def run(self, stopping: asyncio.Event) -> None:
        while not stopping.is_set():
            try:
                await retry(self._publish_all, RETRY_BACKOFF, _publish_failed, stopping=stopping)
            except Stopped:
                return
            with contextlib.suppress(TimeoutError):
                await asyncio.wait_for(self._wake.wait(), self.poll_s)
            self._wake.clear()

    async def _publish_all(self) -> None:
        while await self.publish_pending():
            pass

    async def publish_pending(self) -> int:
        """Publish one page of the outbox and clear it; how many were published (0: the outbox is empty)."""
        entries = await self.store.unpublished(self.batch)
        if not entries:
            return 0
        await self._send(entries)
        await self.store.mark_published([e.position for e in entries])
        self.published += len(entries)
        return len(entries)

    async def _send(self, entries: list[OutboxEntry]) -> None:
        """Send ``entries`` in order and wait until the stream has stored every one."""
        acks = []
        for entry in entries:
            headers = {"Nats-Msg-Id": entry.event_id, VERSION_HEADER: str(entry.schema_version)}
            acks.append(
                await self.js.publish_async(event_subject(entry.type, "cluster_state"), entry.body, headers=headers)
            )
        await asyncio.gather(*acks)


def _publish_failed(_failure: Exception, _failures: int, wait_s: float) -> None:
    log.exception("publishing the decision outbox failed; retrying in %.1fs", wait_s)
