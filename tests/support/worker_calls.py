"""Calls to a real specialist worker over NATS, for the tests: control commands, generation, its events."""

from __future__ import annotations

import asyncio

from nats.aio.client import Client

from nrt.adapters.bus import rpc, subjects
from nrt.core.events import AnyEvent, decode
from nrt.core.protocol import ControlCommand, ControlReply, GenerateChunk, GenerateRequest, SamplingParams
from nrt.hosting.worker import Worker


async def control(nc: Client, worker: Worker | str, **fields: object) -> ControlReply:
    """Send one control command to ``worker`` (a worker or its id) and wait for its reply."""
    worker_id = worker if isinstance(worker, str) else worker.worker_id
    command = ControlCommand(reason=str(fields.pop("reason", "command")), **fields)  # type: ignore[arg-type]
    return await rpc.request(nc, subjects.control(worker_id), command, ControlReply, timeout=60)


async def generate(nc: Client, model_id: str, prompt: str, **params: object) -> list[GenerateChunk]:
    session_id = params.pop("session_id", None)
    stream = bool(params.pop("stream", True))
    request = GenerateRequest(
        request_id="r",
        model_id=model_id,
        manifest_version=1,
        prompt=prompt,
        params=SamplingParams(**params),  # type: ignore[arg-type]
        session_id=session_id,  # type: ignore[arg-type]
        stream=stream,
    )
    return [c async for c in rpc.stream(nc, subjects.infer(model_id), request, GenerateChunk, 30, 10)]


async def events(nc: Client, count: int, within: float = 5.0) -> list[AnyEvent]:
    """The first ``count`` events in the stream (waits for them to arrive)."""
    js = nc.jetstream()
    deadline = asyncio.get_running_loop().time() + within
    while True:
        info = await js.stream_info(subjects.EVENTS_STREAM)
        if info.state.messages >= count or asyncio.get_running_loop().time() > deadline:
            break
        await asyncio.sleep(0.05)
    out = []
    for seq in range(1, info.state.messages + 1):
        msg = await js.get_msg(subjects.EVENTS_STREAM, seq)
        assert msg.data is not None
        out.append(decode(msg.data))
    return out
