"""The shared-module additions this work needs: EventEmitter and rpc.frame_payload, on real NATS."""

from __future__ import annotations

import asyncio

import pytest
from nats.aio.client import Client
from nats.aio.msg import Msg

from nrt.adapters.bus import rpc, subjects
from nrt.adapters.bus.emitter import EventEmitter
from nrt.adapters.bus.errors import RemoteError, Unavailable
from nrt.adapters.bus.jetstream import ensure_events_stream
from nrt.core.events import RequestAdmitted, RequestCompleted
from nrt.core.events import decode as decode_event
from nrt.core.protocol import Dispatch


async def stored(nc: Client) -> list[object]:
    js = nc.jetstream()
    info = await js.stream_info(subjects.EVENTS_STREAM)
    out = []
    for seq in range(1, info.state.messages + 1):
        msg = await js.get_msg(subjects.EVENTS_STREAM, seq)
        assert msg.data is not None
        out.append(decode_event(msg.data))
    return out


async def test_emitter_keeps_order_without_waiting_and_flushes(nc: Client) -> None:
    emitter = EventEmitter(nc)
    await emitter.start()
    events = []
    for i in range(50):
        events.append(RequestAdmitted(request_id=f"r{i}", manifest_version=1, model_id="router"))
        events.append(
            RequestCompleted(
                request_id=f"r{i}", manifest_version=1, model_id="m", prompt_tokens=1, completion_tokens=1, latency_ms=1
            )
        )
    for event in events:
        emitter.emit(event)  # synchronous: never blocks the caller
    emitter.emit(events[0])  # a re-sent event is stored once (its id is the message id)
    await emitter.flush(within=10)
    assert emitter.sent == 101
    assert emitter.lost == 0
    assert await stored(nc) == events
    await emitter.close()


async def test_emitter_keeps_an_event_the_stream_cannot_store_and_sends_it_again(nc: Client) -> None:
    await nc.jetstream().delete_stream(subjects.EVENTS_STREAM)  # nothing stores events now
    emitter = EventEmitter(nc, ack_timeout=1.0, max_retry_s=1.0)
    await emitter.start()
    event = RequestAdmitted(request_id="kept", manifest_version=1, model_id="router")
    emitter.emit(event)
    with pytest.raises(TimeoutError):
        await emitter.flush(within=3)  # not stored, not dropped: still outstanding
    assert (emitter.sent, emitter.lost) == (0, 0)
    assert emitter.retried >= 1
    await ensure_events_stream(nc.jetstream())  # the stream is back
    await emitter.flush(within=10)
    assert (emitter.sent, emitter.lost) == (1, 0)
    assert await stored(nc) == [event]
    await emitter.close()


async def test_frame_payload_reads_data_last_end_error_and_no_responders(nc: Client) -> None:
    inbox = nc.new_inbox()
    queue: asyncio.Queue[Msg] = asyncio.Queue()
    await nc.subscribe(inbox, cb=queue.put)
    frames = rpc.StreamInbox(nc, inbox)
    dispatch = Dispatch(
        request_id="r", entry_model="router", intent=None, target="fallback", scores={}, router_ms=1, rule="x"
    )
    await frames.send(dispatch)
    assert not frames.ended
    await frames.send(dispatch, last=True)
    assert frames.ended
    await frames.fail(RemoteError("context_window_exceeded", "too long", 400))
    await frames.end()
    assert rpc.frame_payload(await queue.get(), "s") == (rpc.encode(dispatch), False)
    assert rpc.frame_payload(await queue.get(), "s") == (rpc.encode(dispatch), True)
    with pytest.raises(RemoteError) as caught:
        rpc.frame_payload(await queue.get(), "s")
    assert (caught.value.code, caught.value.status) == ("context_window_exceeded", 400)
    assert rpc.frame_payload(await queue.get(), "s") == (None, True)
    await nc.publish("nrt.nobody.listens", b"{}", reply=inbox)  # the server answers 503: no responders
    with pytest.raises(Unavailable, match=r"nothing is serving nrt\.infer\.x"):
        rpc.frame_payload(await asyncio.wait_for(queue.get(), 5), "nrt.infer.x")
