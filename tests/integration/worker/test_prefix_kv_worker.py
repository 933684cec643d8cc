"""Shared-prefix KV on a worker: requests of a model that start alike reuse the shared part's KV
(``cached_tokens``) from the third on (the second stores it), and every stored and evicted prefix is
recorded as an event (a prompt nobody shares records none)."""

from __future__ import annotations

from nrt.adapters.inference import BatchingGenerator
from nrt.core.events import PrefixKvEvicted, PrefixKvStored
from nrt.core.manifest import ModelSpec, Role
from nrt.core.protocol import GenerateChunk, GenerateRequest, SamplingParams
from shell_fakes import LLAMA, Jobs

TEMPLATE = "You answer billing questions for ACME in one polite sentence. Never guess an amount. " * 2


def ask(n: int, question: str, session_id: str | None = None, template: str = TEMPLATE) -> GenerateRequest:
    return GenerateRequest(
        request_id=f"r-{n}",
        model_id="m",
        manifest_version=1,
        prompt=f"{template}\nQuestion: {question}\nAnswer:",
        params=SamplingParams(max_tokens=4, temperature=0.0),
        session_id=session_id,
        stream=True,
    )


async def answer(jobs: Jobs, request: GenerateRequest) -> list[GenerateChunk]:
    return [chunk async for chunk in jobs.serving.generate(request)]


def cached(chunks: list[GenerateChunk]) -> int:
    usage = chunks[-1].usage
    assert usage is not None
    return usage.cached_tokens


async def load(jobs: Jobs) -> BatchingGenerator:
    jobs.shell.specs["m"] = ModelSpec(id="m", role=Role.SPECIALIST, source=LLAMA)
    await jobs.command("load", "m", source=LLAMA, tier="resident")
    runtime = jobs.host.runtime("m")
    assert isinstance(runtime, BatchingGenerator)
    return runtime


async def test_requests_sharing_a_template_reuse_its_kv_and_record_it(jobs: Jobs) -> None:
    runtime = await load(jobs)
    first = await answer(jobs, ask(1, "Why was I charged twice?", "a"))
    assert jobs.shell.of(PrefixKvStored) == []  # a prompt nobody shares yet: its ids are noted, nothing held
    second = await answer(jobs, ask(2, "Where is my invoice?", "b"))
    third = await answer(jobs, ask(3, "Can I pay later?"))
    fourth = await answer(jobs, ask(4, "How do I get a refund?", "c"))
    assert cached(first) == cached(second) == 0  # the second proves the template shared and stores it
    assert cached(third) >= len(TEMPLATE)  # tiny-llama: a token per byte, after its BOS
    assert cached(fourth) >= len(TEMPLATE)
    stored = jobs.shell.of(PrefixKvStored)
    assert [(e.model_id, e.worker_id) for e in stored] == [("m", "w-jobs")]  # the shared part, once
    shared = stored[0]
    assert shared.tokens % 16 == 0
    common = 1 + len(TEMPLATE + "\nQuestion: ")  # BOS and the text every prompt starts with
    assert common - 16 < shared.tokens <= common
    assert sum(e.kv_bytes for e in stored) == runtime.prefixes.total_bytes
    assert jobs.shell.of(PrefixKvEvicted) == []


async def test_prefixes_beyond_the_worker_s_bytes_are_evicted_and_recorded(jobs: Jobs) -> None:
    jobs.host.prefix_cache_bytes = 1  # nothing fits: nothing is held
    runtime = await load(jobs)
    await answer(jobs, ask(1, "Why?"))
    await answer(jobs, ask(2, "How?"))
    assert jobs.shell.of(PrefixKvStored) == []
    runtime.prefixes.capacity_bytes = 10**9
    await answer(jobs, ask(3, "Why?"))  # the same prompt as the first: what they share is all of it
    (held,) = jobs.shell.of(PrefixKvStored)
    runtime.prefixes.capacity_bytes = held.kv_bytes  # room for one entry
    other = "Another specialist's rules, long enough to be held. " * 3
    await answer(jobs, ask(4, "How?", template=other))
    await answer(jobs, ask(5, "Why not?", template=other))  # the second stores what they share
    evicted = jobs.shell.of(PrefixKvEvicted)
    assert [(e.prefix_key, e.bytes_freed, e.reason) for e in evicted] == [
        (held.prefix_key, held.kv_bytes, "prefix_cache_full")
    ]
