"""The whole request path on an authenticating bus: each service connects as itself and a request is answered.

The gateway, router_svc (with its router host) and the specialist worker each connect with their own
nkey (``nrt.adapters.bus.auth``), so every subject they use, every JetStream call they make (following the
stream, emitting events) and the token stream into the gateway's inbox pass the server's permissions.
"""

from __future__ import annotations

import asyncio
from pathlib import Path

from nats.aio.client import Client

from harness import start_stack
from nrt.adapters.bus import subjects
from nrt.core.events import RequestAdmitted, RequestCompleted, RequestRouted, WorkerJoined

BILLING = "I was charged twice for my order"


async def test_a_routed_streamed_request_is_answered_with_every_service_as_itself(
    secure_nats_url: str, bus_keys: Path, nrt_home: Path
) -> None:
    async with start_stack(secure_nats_url, "tiny-support.yaml", keys=bus_keys) as stack:
        stream = await stack.client().chat.completions.create(
            model="router", messages=[{"role": "user", "content": BILLING}], stream=True, max_tokens=5
        )
        chunks = [c async for c in stream]
        assert chunks[-1].model == "billing"
        assert any(c.choices and c.choices[0].delta.content for c in chunks)
        completed = subjects.event("api_gateway", RequestCompleted.__name__)
        on = await _subjects_in_stream(stack.nc)
        for _ in range(50):  # the gateway emits the completion once the answer is out
            if completed in on:
                break
            await asyncio.sleep(0.1)
            on = await _subjects_in_stream(stack.nc)
        # each event on its own publisher's subject: the gateway's, router_svc's and the worker's
        assert completed in on
        assert subjects.event("api_gateway", RequestAdmitted.__name__) in on
        assert subjects.event("router_svc", RequestRouted.__name__) in on
        assert subjects.event("specialist_worker", WorkerJoined.__name__) in on
        assert subjects.event("router_svc", WorkerJoined.__name__) in on
        assert all(subjects.event_origin(subject) is not None for subject in on)


async def _subjects_in_stream(nc: Client) -> set[str]:
    js = nc.jetstream()
    info = await js.stream_info(subjects.EVENTS_STREAM)
    return {(await js.get_msg(subjects.EVENTS_STREAM, seq)).subject for seq in range(1, info.state.messages + 1)}


async def test_embeddings_and_completions_pass_the_bus_permissions(
    secure_nats_url: str, bus_keys: Path, nrt_home: Path
) -> None:
    """The gateway asks the entry encoder's subject for embeddings itself (``nrt.infer.*``, its permission)
    and sends a completion through router_svc, each service as itself."""
    async with start_stack(secure_nats_url, "tiny-support.yaml", keys=bus_keys) as stack:
        client = stack.client()
        vectors = await client.embeddings.create(model="router", input=[BILLING, "hello"], encoding_format="float")
        assert len(vectors.data) == 2
        assert vectors.usage.prompt_tokens > 0
        completion = await client.completions.create(model="billing", prompt="Once upon a time", max_tokens=3)
        assert completion.usage is not None
        assert completion.usage.completion_tokens > 0
