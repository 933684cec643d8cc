"""A real specialist worker, in-process, on real NATS, hosting tiny real ONNX models."""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator
from pathlib import Path

import pytest
from nats.aio.client import Client

from nrt.bus import rpc, subjects
from nrt.events import AnyEvent, decode
from nrt.protocol import ControlCommand, ControlReply, GenerateChunk, GenerateRequest, SamplingParams
from specialist_worker.resources import detect
from specialist_worker.worker import Worker


@pytest.fixture
async def worker(nc: Client, nrt_home: Path) -> AsyncIterator[Worker]:
    w = Worker(nc, detect(), worker_id="w-test", max_batch_size=8)
    await w.start()
    yield w
    await w.stop()


async def control(nc: Client, worker: Worker, **fields: object) -> ControlReply:
    command = ControlCommand(reason=str(fields.pop("reason", "command")), **fields)  # type: ignore[arg-type]
    return await rpc.request(nc, subjects.control(worker.worker_id), command, ControlReply, timeout=30)


async def generate(nc: Client, model_id: str, prompt: str, **params: object) -> list[GenerateChunk]:
    session_id = params.pop("session_id", None)
    request = GenerateRequest(
        request_id="r",
        model_id=model_id,
        manifest_version=1,
        prompt=prompt,
        params=SamplingParams(**params),  # type: ignore[arg-type]
        session_id=session_id,  # type: ignore[arg-type]
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
