"""Shared-prefix KV on the tiny model: prompts that start with one template reuse its KV (the second such
prompt stores it, the third on reuse it), and every greedy output is the one a full prefill gives (new
sessions, a session on top, a batch of them)."""

from __future__ import annotations

import asyncio

from nrt.adapters.inference import BatchingGenerator, CausalLM, ChatMessage, Chunk, GenerationRequest, PromptTemplate
from nrt.adapters.inference.prefixes import BLOCK_TOKENS, MIN_PREFIX_TOKENS, block_floor, common_prefix

TEMPLATE = PromptTemplate()
SYSTEM = "You are the billing specialist. Answer in one short sentence, politely. " * 3
QUESTIONS = ("Why was I charged twice?", "How do I get a refund?", "Where is my invoice?", "Can I pay later?")


def prompt(question: str, *earlier: ChatMessage) -> str:
    return TEMPLATE.render([ChatMessage("system", SYSTEM), *earlier, ChatMessage("user", question)])


async def run(gen: BatchingGenerator, request: GenerationRequest) -> list[Chunk]:
    return [chunk async for chunk in gen.generate(request)]


def ids(chunks: list[Chunk]) -> list[int]:
    return [t for c in chunks for t in c.token_ids]


def cached(chunks: list[Chunk]) -> int:
    usage = chunks[-1].usage
    assert usage is not None
    return usage.cached_tokens


async def test_new_sessions_sharing_a_template_reuse_its_kv_with_identical_output(
    generator: BatchingGenerator,
) -> None:
    template_ids = len(generator.model.encode(prompt("")))
    # what the first two prompts share, cut to a block: the entry the second stores, which later ones reuse
    shared = block_floor(common_prefix(*(generator.model.encode(prompt(q)) for q in QUESTIONS[:2])))
    assert template_ids - 8 - BLOCK_TOKENS < shared <= template_ids
    for i, question in enumerate(QUESTIONS):
        request = GenerationRequest(prompt=prompt(question), max_tokens=10, session_id=f"s{i}", prefix_owner="m")
        with_cache = await run(generator, request)
        without = await run(generator, GenerationRequest(prompt=prompt(question), max_tokens=10))
        assert ids(with_cache) == ids(without)
        assert cached(without) == 0
        if i < 2:
            assert cached(with_cache) == 0  # the first prompt is noted, the second proves the template shared
        else:
            assert cached(with_cache) == shared
    held = generator.prefixes.usage()
    assert held
    assert all(u.owner == "m" and u.tokens >= MIN_PREFIX_TOKENS for u in held)
    assert generator.stats().prefix_bytes == sum(u.nbytes for u in held) > 0


async def seed(generator: BatchingGenerator, *questions: str) -> None:
    """Prompts of the template before the test's: the second stores the part they share."""
    for question in questions:
        await run(generator, GenerationRequest(prompt=prompt(question), max_tokens=4, prefix_owner="m"))
    assert generator.prefixes.usage()


async def test_a_session_on_top_of_a_shared_prefix(generator: BatchingGenerator) -> None:
    await seed(generator, QUESTIONS[0], QUESTIONS[3])
    first = await run(
        generator, GenerationRequest(prompt=prompt(QUESTIONS[1]), max_tokens=8, session_id="conv", prefix_owner="m")
    )
    assert cached(first) > 0  # turn 1 of a new session starts from the template's KV
    earlier = (ChatMessage("user", QUESTIONS[1]), ChatMessage("assistant", "".join(c.text for c in first)))
    turn2 = prompt(QUESTIONS[2], *earlier)
    second = await run(generator, GenerationRequest(prompt=turn2, max_tokens=8, session_id="conv", prefix_owner="m"))
    usage = first[-1].usage
    assert usage is not None
    assert cached(second) >= usage.prompt_tokens  # its session's KV, longer than the template's
    fresh = await run(generator, GenerationRequest(prompt_ids=tuple(generator.model.encode(turn2)), max_tokens=8))
    assert ids(second) == ids(fresh)


async def test_a_batch_of_requests_sharing_it(generator: BatchingGenerator) -> None:
    await seed(generator, "Hello", "Hi there")

    async def both(question: str) -> tuple[list[Chunk], list[Chunk]]:
        shared = run(generator, GenerationRequest(prompt=prompt(question), max_tokens=12, prefix_owner="m"))
        alone = run(generator, GenerationRequest(prompt=prompt(question), max_tokens=12))
        a, b = await asyncio.gather(shared, alone)
        return a, b

    results = await asyncio.gather(*(both(q) for q in QUESTIONS))
    for with_cache, without in results:
        assert ids(with_cache) == ids(without)
        assert cached(with_cache) > 0


async def test_entries_are_evicted_least_recently_used_within_the_bytes(tiny_llama: CausalLM) -> None:
    probe = BatchingGenerator(tiny_llama)
    try:
        for question in ("x", "y"):
            await run(probe, GenerationRequest(prompt=prompt(question), max_tokens=1, prefix_owner="m"))
        (entry,) = probe.prefixes.usage()
    finally:
        await probe.aclose()
    small = BatchingGenerator(tiny_llama, prefix_cache_bytes=entry.nbytes + entry.nbytes // 2)  # one entry's room
    try:
        other = "You are the shipping specialist. Track parcels and nothing else. " * 3
        for system in (SYSTEM, other):
            for question in ("hi", "yes"):  # the second stores what they share
                text = TEMPLATE.render([ChatMessage("system", system), ChatMessage("user", question)])
                await run(small, GenerationRequest(prompt=text, max_tokens=1, prefix_owner="m"))
        changes = small.prefixes.drain()
        assert [c.action for c in changes] == ["stored", "stored", "evicted"]
        assert changes[2].key == changes[0].key
        assert small.prefixes.total_bytes == changes[1].nbytes <= small.prefixes.capacity_bytes
        again = await run(small, GenerationRequest(prompt=prompt("Why?"), max_tokens=4, prefix_owner="m"))
        assert cached(again) == 0  # evicted: computed again
    finally:
        await small.aclose()
