"""The emitter keeps a stream's events in order when one of them must be sent again (a NATS cluster electing the
events stream's leader refuses a publish for a moment): the later events of its request wait for it."""

from __future__ import annotations

import asyncio

from nats.aio.client import Client

from nrt.adapters.bus import subjects
from nrt.adapters.bus.emitter import EventEmitter
from nrt.adapters.bus.jetstream import ensure_events_stream
from nrt.core.events import Event, RequestAdmitted, RequestCompleted
from nrt.core.events import decode as decode_event


async def stored(nc: Client) -> list[Event]:
    js = nc.jetstream()
    info = await js.stream_info(subjects.EVENTS_STREAM)
    found = []
    for seq in range(info.state.first_seq, info.state.last_seq + 1):
        message = await js.get_msg(subjects.EVENTS_STREAM, seq)
        assert message.data is not None
        found.append(decode_event(message.data))
    return found


def completed(request_id: str) -> RequestCompleted:
    return RequestCompleted(
        request_id=request_id, manifest_version=1, model_id="m", prompt_tokens=1, completion_tokens=1, latency_ms=1
    )


async def test_an_event_sent_again_holds_back_the_later_events_of_its_request_only(nc: Client) -> None:
    js = nc.jetstream()
    await js.delete_stream(subjects.EVENTS_STREAM)  # the stream refuses events for a moment
    emitter = EventEmitter(nc, ack_timeout=1.0, max_retry_s=1.0)
    await emitter.start()
    admitted = RequestAdmitted(request_id="held", manifest_version=1, model_id="router")
    emitter.emit(admitted)
    for _ in range(500):  # refused: it is sent again after its back-off
        if emitter.retried:
            break
        await asyncio.sleep(0.01)
    assert emitter.retried == 1
    await ensure_events_stream(js)  # the stream is back before the retry
    other = RequestAdmitted(request_id="other", manifest_version=1, model_id="router")
    ended = completed("held")
    emitter.emit(ended)  # without the hold, stored at once: before its request's RequestAdmitted
    emitter.emit(other)  # another request's: not held
    await emitter.flush(within=10)
    assert (emitter.sent, emitter.lost) == (3, 0)
    assert await stored(nc) == [other, admitted, ended]
    await emitter.close()
