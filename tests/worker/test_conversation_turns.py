"""A conversation's turns on a real tiny model: the whole conversation is the prompt, and turn N+1
prefills only what turn N's KV cache did not already hold."""

from __future__ import annotations

from shell_fakes import LLAMA, Jobs

from nrt.events import SessionTouched
from nrt.inference import BatchingGenerator
from nrt.manifest import ModelSpec, Role, TurnTemplate
from nrt.protocol import ChatMessage, GenerateChunk, GenerateRequest, SamplingParams
from specialist_worker.prompts import template_for

SPEC = ModelSpec(
    id="m",
    role=Role.SPECIALIST,
    source=LLAMA,
    template="Answer the customer.\n\n{turns}Agent:",
    turn_template=TurnTemplate(user="Customer: {content}\n", assistant="Agent: {content}\n\n"),
)


def turn(messages: list[ChatMessage], session_id: str | None = "s1") -> GenerateRequest:
    return GenerateRequest(
        request_id="r",
        model_id="m",
        manifest_version=1,
        messages=tuple(messages),
        params=SamplingParams(max_tokens=5),
        session_id=session_id,
        stream=False,
    )


async def answer(jobs: Jobs, request: GenerateRequest) -> GenerateChunk:
    chunks = [chunk async for chunk in jobs.serving.generate(request)]
    assert len(chunks) == 1
    assert chunks[0].usage is not None
    assert chunks[0].timings is not None
    return chunks[0]


async def test_the_second_turn_sees_the_first_and_prefills_only_the_new_tokens(jobs: Jobs) -> None:
    jobs.shell.specs["m"] = SPEC
    await jobs.command("load", "m", source=LLAMA, tier="resident")
    runtime = jobs.host.runtime("m")
    assert isinstance(runtime, BatchingGenerator)
    template = template_for(SPEC)
    history = [ChatMessage("user", "My order number is 4417.")]
    first = await answer(jobs, turn(history))
    history += [ChatMessage("assistant", first.text), ChatMessage("user", "What is my order number?")]
    second = await answer(jobs, turn(history))
    prompt1 = runtime.model.encode(template.render(history[:1]))
    prompt2 = runtime.model.encode(template.render(history))
    assert first.usage is not None
    assert second.usage is not None
    assert second.timings is not None
    # the model saw the whole conversation: turn 1, its answer and turn 2
    assert second.usage.prompt_tokens == len(prompt2) > len(prompt1) + first.usage.completion_tokens
    # turn 2 started from turn 1's KV: all of turn 1's prompt was reused, only the rest prefilled
    assert second.usage.cached_tokens >= len(prompt1) == first.usage.prompt_tokens
    assert second.timings.prefilled_tokens == len(prompt2) - second.usage.cached_tokens
    touched = jobs.shell.of(SessionTouched)
    assert [t.reused_tokens for t in touched] == [0, second.usage.cached_tokens]
    assert touched[-1].kv_bytes > touched[0].kv_bytes > 0  # measured: the cache grew with the turn


async def test_a_last_user_template_reuses_only_its_fixed_prefix(jobs: Jobs) -> None:
    """The old form still works: the prompt is the last message in the template, so only the text before it is reused."""
    jobs.shell.specs["m"] = ModelSpec(
        id="m", role=Role.SPECIALIST, source=LLAMA, template="Answer briefly.\nQ: {last_user}\nA:"
    )
    await jobs.command("load", "m", source=LLAMA, tier="resident")
    first = await answer(jobs, turn([ChatMessage("user", "My order number is 4417.")]))
    second = await answer(jobs, turn([ChatMessage("user", "What is my order number?")]))
    assert first.usage is not None
    assert second.usage is not None
    assert 0 < second.usage.cached_tokens < first.usage.prompt_tokens
