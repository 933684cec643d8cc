"""NATS plumbing: replies or explicit error frames, never a silent timeout; one trace per call.

Request/reply is served the control plane's way (a FastStream subscriber on a real broker,
``nrt.adapters.bus.broker``) and asked both ways: through a broker and with raw nats-py, as
``nrt.adapters.bus.rpc`` and ``nrt health`` do. Streams are the hot path's (``nrt.adapters.bus.rpc``).
"""

from __future__ import annotations

import asyncio
import time

import msgspec
import pytest
from faststream.nats import NatsBroker
from nats.aio.client import Client
from nats.aio.msg import Msg
from opentelemetry import trace
from opentelemetry.sdk.trace.export.in_memory_span_exporter import InMemorySpanExporter
from opentelemetry.trace import SpanKind

from nrt.adapters.bus import broker as bus
from nrt.adapters.bus import rpc, subjects
from nrt.adapters.bus.errors import BadRequest, DeadlineExceeded, RemoteError, Unavailable
from nrt.adapters.bus.jetstream import EventPublisher
from nrt.core.events import WorkerLost


class Ask(msgspec.Struct, frozen=True):
    text: str
    repeat: int = 1


class Answer(msgspec.Struct, frozen=True):
    text: str


class Token(msgspec.Struct, frozen=True):
    index: int


async def _echo(ask: Ask) -> Answer:
    if ask.text == "boom":
        raise RuntimeError("the handler exploded")
    if ask.text == "bad":
        raise BadRequest("'bad' is not a question")
    if ask.text == "slow":
        await asyncio.sleep(2)
    return Answer(text=ask.text * ask.repeat)


async def test_request_gets_the_reply(nc: Client, broker: NatsBroker) -> None:
    await bus.serve(broker, "t.echo", _echo)
    assert await bus.call(broker, "t.echo", Ask(text="ab", repeat=2), Answer, timeout=2) == Answer(text="abab")
    assert await rpc.request(nc, "t.echo", Ask(text="c", repeat=3), Answer, timeout=2) == Answer(text="ccc")


async def test_handler_failure_is_an_error_frame_not_a_timeout(nc: Client, broker: NatsBroker) -> None:
    await bus.serve(broker, "t.echo", _echo)
    started = time.perf_counter()
    with pytest.raises(RemoteError) as info:
        await bus.call(broker, "t.echo", Ask(text="boom"), Answer, timeout=5)
    assert time.perf_counter() - started < 1.0
    assert info.value.code == "internal"
    assert info.value.status == 500
    assert "the handler exploded" in info.value.message
    with pytest.raises(RemoteError) as bad:
        await rpc.request(nc, "t.echo", Ask(text="bad"), Answer, timeout=5)
    assert (bad.value.code, bad.value.status) == ("bad_request", 400)


async def test_invalid_request_is_answered_with_bad_request(nc: Client, broker: NatsBroker) -> None:
    await bus.serve(broker, "t.echo", _echo)
    started = time.perf_counter()
    reply = await nc.request("t.echo", b'{"text": 5}', timeout=5)
    assert time.perf_counter() - started < 1.0
    assert reply.headers is not None
    assert reply.headers[bus.FRAME] == bus.ERROR
    frame = msgspec.json.decode(reply.data)
    assert frame["code"] == "bad_request"
    assert "invalid Ask" in frame["message"]
    assert "$.text" in frame["message"]


async def test_no_responders_and_deadlines_are_named(nc: Client, broker: NatsBroker) -> None:
    with pytest.raises(Unavailable, match=r"nothing is serving t\.nobody"):
        await rpc.request(nc, "t.nobody", Ask(text="x"), Answer, timeout=1)
    with pytest.raises(Unavailable, match=r"nothing is serving t\.nobody"):
        await bus.call(broker, "t.nobody", Ask(text="x"), Answer, timeout=1)
    await bus.serve(broker, "t.echo", _echo, max_workers=2)
    with pytest.raises(DeadlineExceeded, match=r"no reply from t\.echo within 0\.2s"):
        await rpc.request(nc, "t.echo", Ask(text="slow"), Answer, timeout=0.2)
    with pytest.raises(DeadlineExceeded, match=r"no reply from t\.echo within 0\.2s"):
        await bus.call(broker, "t.echo", Ask(text="slow"), Answer, timeout=0.2)


async def _count(ask: Ask, inbox: rpc.StreamInbox) -> None:
    for i in range(ask.repeat):
        await inbox.send(Token(index=i))
    if ask.text == "fail-midway":
        raise RemoteError("worker_failed", "the model crashed after 3 tokens", 502)


async def _count_to_last(ask: Ask, inbox: rpc.StreamInbox) -> None:
    for i in range(ask.repeat):
        await inbox.send(Token(index=i), last=i == ask.repeat - 1)


async def test_a_stream_whose_last_chunk_says_so_needs_no_end_frame(nc: Client) -> None:
    await rpc.serve_stream(nc, "t.last", Ask, _count_to_last)
    tokens = [t.index async for t in rpc.stream(nc, "t.last", Ask(text="", repeat=3), Token, 2, 2)]
    assert tokens == [0, 1, 2]
    inbox = nc.new_inbox()
    frames: asyncio.Queue[Msg] = asyncio.Queue()
    await nc.subscribe(inbox, cb=frames.put)
    await nc.publish("t.last", rpc.encode(Ask(text="", repeat=2)), reply=inbox)
    kinds = [(await asyncio.wait_for(frames.get(), 2)).headers[rpc.FRAME] for _ in range(2)]
    assert kinds == [rpc.DATA, rpc.LAST]
    await nc.flush()
    await asyncio.sleep(0.2)
    assert frames.empty()  # serve_stream sent no end frame after the last chunk


async def test_streamed_reply_ends_or_fails_explicitly(nc: Client) -> None:
    await rpc.serve_stream(nc, "t.count", Ask, _count)
    tokens = [t.index async for t in rpc.stream(nc, "t.count", Ask(text="", repeat=5), Token, 2, 2)]
    assert tokens == [0, 1, 2, 3, 4]
    seen: list[int] = []
    with pytest.raises(RemoteError, match="the model crashed after 3 tokens"):
        async for t in rpc.stream(nc, "t.count", Ask(text="fail-midway", repeat=3), Token, 2, 2):
            seen.append(t.index)
    assert seen == [0, 1, 2]


async def test_stream_without_a_server_fails_fast_and_a_silent_one_hits_its_deadline(nc: Client) -> None:
    started = time.perf_counter()
    with pytest.raises(Unavailable, match=r"nothing is serving t\.void"):
        async for _ in rpc.stream(nc, "t.void", Ask(text=""), Token, 5, 5):
            pass
    assert time.perf_counter() - started < 1.0

    async def silent(msg: object) -> None:
        return None

    await nc.subscribe("t.silent", cb=silent)
    with pytest.raises(DeadlineExceeded, match=r"no first reply from t\.silent within 0\.3s"):
        async for _ in rpc.stream(nc, "t.silent", Ask(text=""), Token, 0.3, 0.3):
            pass


async def test_forwarded_request_streams_to_the_original_inbox(nc: Client) -> None:
    """A middle service forwards with the caller's inbox; the answer skips the middle."""
    await rpc.serve_stream(nc, "t.count", Ask, _count)

    async def router(msg: object) -> None:  # hands the caller's inbox on, replies nothing itself
        assert hasattr(msg, "reply")
        await rpc.forward(nc, "t.count", msgspec.json.decode(msg.data, type=Ask), msg.reply)  # type: ignore[attr-defined]

    await nc.subscribe("t.route", cb=router)
    tokens = [t.index async for t in rpc.stream(nc, "t.route", Ask(text="", repeat=3), Token, 2, 2)]
    assert tokens == [0, 1, 2]


async def test_jetstream_deduplicates_by_event_id(nc: Client) -> None:
    publisher = EventPublisher(nc)
    event = WorkerLost(worker_id="w9", reason="shutdown")
    first = await publisher.publish(event)
    second = await publisher.publish(event)
    assert first == second
    info = await nc.jetstream().stream_info(subjects.EVENTS_STREAM)
    assert info.state.messages == 1


async def test_one_trace_across_request_and_reply(nc: Client, broker: NatsBroker, spans: InMemorySpanExporter) -> None:
    """A raw caller's span (trace context in the headers) parents FastStream's consumer span, which parents the work."""
    tracer = trace.get_tracer("test")
    inner: list[trace.SpanContext] = []

    async def handler(ask: Ask) -> Answer:
        with tracer.start_as_current_span("work") as span:
            inner.append(span.get_span_context())
        return Answer(text=ask.text)

    await bus.serve(broker, "t.traced", handler)
    with tracer.start_as_current_span("caller") as root:
        await rpc.request(nc, "t.traced", Ask(text="x"), Answer, timeout=2)
    await asyncio.sleep(0.05)
    finished = {s.name: s for s in spans.get_finished_spans()}
    client, work = finished["nats request t.traced"], finished["work"]
    (server,) = [s for s in spans.get_finished_spans() if s.kind is SpanKind.CONSUMER and "t.traced" in s.name]
    trace_id = root.get_span_context().trace_id
    assert {client.context.trace_id, server.context.trace_id, work.context.trace_id} == {trace_id}
    assert client.parent is not None
    assert client.parent.span_id == root.get_span_context().span_id
    assert server.parent is not None
    assert server.parent.span_id == client.context.span_id
    assert work.parent is not None
    assert work.parent.span_id == server.context.span_id
    assert client.kind is SpanKind.CLIENT
