"""Workers whose NATS connection was made again, read from their heartbeats (``WorkerHeartbeat.bus_reconnects``).

A server of a NATS cluster that dies takes with it what it held: a request router_svc had forwarded to a worker
on it, a frame a worker had sent through it. The worker reconnects to another server at once and beats on, so
the event log never says it is lost; its heartbeat's reconnect count rises instead. The gateway then ends the
requests it had taken and those no worker has taken yet (:meth:`Inboxes.worker_reconnected`): a clear 503 now
(or the gateway's one retry) rather than a deadline's 504 half a minute later.
"""

from __future__ import annotations

import logging

import msgspec
from nats.aio.client import Client
from nats.aio.msg import Msg
from nats.aio.subscription import Subscription

from api_gateway.reply_stream import Inboxes
from nrt.adapters.bus import subjects

log = logging.getLogger("api_gateway")


class _Reconnects(msgspec.Struct, frozen=True):
    """What the gateway reads of a ``WorkerHeartbeat`` (the rest of it, the models held, is not decoded)."""

    worker_id: str
    bus_reconnects: int = 0


_beats = msgspec.json.Decoder(_Reconnects)


def read_beat(data: bytes) -> tuple[str, int]:
    """(worker id, reconnect count) of a heartbeat's bytes; raises msgspec's errors on one that does not decode."""
    beat = _beats.decode(data)
    return beat.worker_id, beat.bus_reconnects


class ReconnectCounts:
    """The reconnect count each worker last reported; says when one rises (not on first sight)."""

    def __init__(self) -> None:
        self._last: dict[str, int] = {}

    def rose(self, worker_id: str, reconnects: int) -> bool:
        before = self._last.get(worker_id)
        self._last[worker_id] = reconnects
        return before is not None and reconnects > before

    def forget(self, worker_id: str) -> None:
        """``worker_id`` is gone (the log says it is lost): a worker that comes back under the same id starts afresh."""
        self._last.pop(worker_id, None)


async def watch(nc: Client, inboxes: Inboxes, counts: ReconnectCounts) -> Subscription:
    """Read every worker's heartbeat; end what a worker held each time its count rises."""

    async def on_beat(msg: Msg) -> None:
        try:
            worker_id, reconnects = read_beat(msg.data)
        except (msgspec.DecodeError, msgspec.ValidationError) as exc:
            log.warning("ignoring a worker heartbeat that does not decode: %s", exc)
            return
        if counts.rose(worker_id, reconnects) and (ended := inboxes.worker_reconnected(worker_id)):
            log.warning(
                "worker %s reconnected to NATS: ended %d request(s) it held or no worker had taken yet",
                worker_id,
                ended,
            )

    return await nc.subscribe(subjects.WORKER_HEARTBEAT, cb=on_beat)
