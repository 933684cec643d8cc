"""max_active_sessions on a real tiny model: one session too many evicts the least recently used
idle session's KV, with an event saying which and why; a session with a request in flight stays."""

from __future__ import annotations

from nrt.adapters.inference import BatchingGenerator
from nrt.core.events import SessionKvEvicted, SessionOpened
from nrt.core.manifest import ModelSpec, Role
from nrt.core.protocol import GenerateChunk, GenerateRequest, SamplingParams
from nrt.hosting.model_host import session_key
from shell_fakes import LLAMA, PROMPT, Jobs


def turn(session_id: str, max_tokens: int = 3) -> GenerateRequest:
    return GenerateRequest(
        request_id=f"r-{session_id}",
        model_id="m",
        manifest_version=1,
        prompt=PROMPT,
        params=SamplingParams(max_tokens=max_tokens),
        session_id=session_id,
        stream=True,
    )


async def answer(jobs: Jobs, request: GenerateRequest) -> list[GenerateChunk]:
    return [chunk async for chunk in jobs.serving.generate(request)]


async def load(jobs: Jobs, max_active_sessions: int) -> BatchingGenerator:
    jobs.shell.specs["m"] = ModelSpec(
        id="m", role=Role.SPECIALIST, source=LLAMA, max_active_sessions=max_active_sessions
    )
    await jobs.command("load", "m", source=LLAMA, tier="resident")
    runtime = jobs.host.runtime("m")
    assert isinstance(runtime, BatchingGenerator)
    return runtime


async def test_one_session_too_many_evicts_the_least_recently_used(jobs: Jobs) -> None:
    runtime = await load(jobs, max_active_sessions=2)
    await answer(jobs, turn("s1"))
    await answer(jobs, turn("s2"))
    await answer(jobs, turn("s1"))  # s1 is used again: s2 is now the least recently used
    held = runtime.session_bytes(session_key("m", "s2"))
    assert held > 0
    await answer(jobs, turn("s3"))
    assert [e.session_id for e in jobs.shell.of(SessionOpened)] == ["s1", "s2", "s3"]
    evicted = jobs.shell.of(SessionKvEvicted)
    assert [(e.session_id, e.model_id, e.worker_id, e.reason, e.bytes_freed) for e in evicted] == [
        ("s2", "m", "w-jobs", "max_active_sessions", held)
    ]
    assert set(jobs.host.get("m").sessions) == {"s1", "s3"}
    assert runtime.session_bytes(session_key("m", "s2")) == 0
    assert runtime.session_bytes(session_key("m", "s1")) > 0


async def test_a_session_with_a_request_in_flight_is_never_evicted(jobs: Jobs) -> None:
    runtime = await load(jobs, max_active_sessions=1)
    await answer(jobs, turn("s1"))
    streaming = jobs.serving.generate(turn("s1", max_tokens=8))
    first = await anext(streaming)  # s1's second turn is in flight
    assert first.finish_reason is None
    await answer(jobs, turn("s2"))  # one too many, but the only other session is busy
    assert jobs.shell.of(SessionKvEvicted) == []
    rest = [chunk async for chunk in streaming]
    assert rest[-1].finish_reason is not None
    assert runtime.session_bytes(session_key("m", "s1")) > 0  # its turn finished with its KV kept
    await answer(jobs, turn("s3"))  # now both idle ones go, least recently used (s2 finished first) first
    assert [(e.session_id, e.reason) for e in jobs.shell.of(SessionKvEvicted)] == [
        ("s2", "max_active_sessions"),
        ("s1", "max_active_sessions"),
    ]
    assert set(jobs.host.get("m").sessions) == {"s3"}
