"""The emitter's backlog: once an event of a stream must be sent again, that stream's events go one at a time, in
the order emitted, until all are stored; other streams' events are not held. JetStream is a stand-in here whose
acknowledgements the test gives or refuses (the same on real NATS: tests/integration/bus/test_emitter_order.py)."""

from __future__ import annotations

import asyncio
from typing import Any

from nats.js.api import PubAck
from nats.js.errors import ServiceUnavailableError

from nrt.adapters.bus.emitter import EventEmitter
from nrt.core.events import Event, RequestAdmitted, RequestCompleted


class StandInJetStream:
    """Takes each publish and keeps its acknowledgement for the test to give (or refuse)."""

    def __init__(self) -> None:
        self.sent: list[tuple[str, asyncio.Future[PubAck]]] = []  # (event id, its acknowledgement)
        self.arrived = asyncio.Event()

    async def publish_async(self, subject: str, payload: bytes, headers: dict[str, str], **_: Any) -> Any:
        future: asyncio.Future[PubAck] = asyncio.get_running_loop().create_future()
        self.sent.append((headers["Nats-Msg-Id"], future))
        self.arrived.set()
        return future

    async def next_send(self, count: int) -> list[str]:
        """Wait until ``count`` events have been sent in all; their ids in order."""
        async with asyncio.timeout(5):
            while len(self.sent) < count:
                self.arrived.clear()
                await self.arrived.wait()
        return [event_id for event_id, _ in self.sent]

    def answer(self, index: int, stored: bool) -> None:
        future = self.sent[index][1]
        if stored:
            future.set_result(PubAck(stream="NRT_EVENTS", seq=index + 1))
        else:  # no leader for a moment: the stream cannot take it
            future.set_exception(ServiceUnavailableError(description="JetStream system temporarily unavailable"))


class StandInClient:
    def __init__(self, js: StandInJetStream) -> None:
        self.js = js

    def jetstream(self, timeout: float = 5.0) -> StandInJetStream:
        return self.js


def completed(request_id: str) -> RequestCompleted:
    return RequestCompleted(
        request_id=request_id, manifest_version=1, model_id="m", prompt_tokens=1, completion_tokens=1, latency_ms=1
    )


async def test_a_refused_event_holds_its_requests_later_events_until_it_is_stored() -> None:
    js = StandInJetStream()
    emitter = EventEmitter(StandInClient(js), max_retry_s=0.01)  # type: ignore[arg-type]
    await emitter.start()
    admitted: Event = RequestAdmitted(request_id="r", manifest_version=1, model_id="router")
    ended: Event = completed("r")
    other: Event = RequestAdmitted(request_id="other", manifest_version=1, model_id="router")
    a, c, x = admitted.event_id, ended.event_id, other.event_id
    for event in (admitted, ended, other):
        emitter.emit(event)
    assert await js.next_send(3) == [a, c, x]  # pipelined while all goes well
    js.answer(0, stored=False)  # the request's first event refused...
    js.answer(1, stored=False)  # ...and the one sent right after it
    js.answer(2, stored=True)  # another request's: stored, not held
    assert await js.next_send(4) == [a, c, x, a]  # the request's events now go one at a time: its first first
    later: Event = completed("other")
    emitter.emit(later)  # another request's event goes at once
    assert (await js.next_send(5))[4] == later.event_id
    js.answer(4, stored=True)
    js.answer(3, stored=False)  # refused again: still first
    assert (await js.next_send(6))[5] == a
    await asyncio.sleep(0.05)
    assert len(js.sent) == 6  # the request's RequestCompleted waits while its RequestAdmitted is not stored
    js.answer(5, stored=True)
    assert (await js.next_send(7))[6] == c  # then it goes
    js.answer(6, stored=True)
    await emitter.flush(within=5)
    stored = [event_id for event_id, future in js.sent if not future.exception()]
    assert stored == [x, later.event_id, a, c]
    assert (emitter.sent, emitter.lost, emitter.retried) == (4, 0, 3)
    await emitter.close()


async def test_an_event_of_a_held_stream_emitted_later_waits_its_turn() -> None:
    js = StandInJetStream()
    emitter = EventEmitter(StandInClient(js), max_retry_s=0.01)  # type: ignore[arg-type]
    await emitter.start()
    admitted: Event = RequestAdmitted(request_id="r", manifest_version=1, model_id="router")
    emitter.emit(admitted)
    await js.next_send(1)
    js.answer(0, stored=False)
    await js.next_send(2)  # sent again after its back-off
    ended: Event = completed("r")
    emitter.emit(ended)  # emitted while its request's first event is on its way again: held
    await asyncio.sleep(0.05)
    assert [event_id for event_id, _ in js.sent] == [admitted.event_id, admitted.event_id]
    js.answer(1, stored=True)
    assert (await js.next_send(3))[2] == ended.event_id
    js.answer(2, stored=True)
    await emitter.flush(within=5)
    assert (emitter.sent, emitter.lost) == (2, 0)
    await emitter.close()
