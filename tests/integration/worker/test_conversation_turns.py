"""A conversation's turns on a real tiny model: the whole conversation is the prompt, and turn N+1
prefills only what turn N's KV cache did not already hold."""

from __future__ import annotations

from nrt.adapters.inference import BatchingGenerator
from nrt.core.events import SessionTouched
from nrt.core.manifest import ModelSpec, Role, TurnTemplate
from nrt.core.protocol import ChatMessage, GenerateChunk, GenerateRequest, SamplingParams
from nrt.hosting.prompts import template_for
from shell_fakes import LLAMA, Jobs

# The assistant part writes the answer right after the cue, as the model wrote it: the tiny random
# model's answers do not start with a space, so ``Agent: {content}`` would not extend turn 1's text.
SPEC = ModelSpec(
    id="m",
    role=Role.SPECIALIST,
    source=LLAMA,
    template="Answer the customer.\n\n{turns}Agent:",
    turn_template=TurnTemplate(user="Customer: {content}\n", assistant="Agent:{content}\n\n"),
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
    text1, text2 = template.render(history[:1]), template.render(history)
    assert first.usage is not None
    assert second.usage is not None
    assert second.timings is not None
    p1, c1 = first.usage.prompt_tokens, first.usage.completion_tokens
    assert p1 == len(runtime.model.encode(text1))
    # the model saw the whole conversation: turn 2's text extends turn 1's prompt and answer, so it
    # runs on turn 1's own ids (prompt and answer) and then the new text, tokenized alone
    assert first.finish_reason == "length"
    assert text2.startswith(text1 + first.text)
    new_text = runtime.model.encode(text2[len(text1 + first.text) :], add_special_tokens=False)
    assert second.usage.prompt_tokens == p1 + c1 + len(new_text)
    # turn 2 started from turn 1's KV, which holds all of it but the last token chosen (never run
    # through the model): no answer token is prefilled again, only that one and the new text
    assert second.usage.cached_tokens == p1 + c1 - 1
    assert second.timings.prefilled_tokens == second.usage.prompt_tokens - (p1 + c1) + 1 == len(new_text) + 1
    touched = jobs.shell.of(SessionTouched)
    assert [t.reused_tokens for t in touched] == [0, second.usage.cached_tokens]
    assert touched[-1].kv_bytes > touched[0].kv_bytes > 0  # measured: the cache grew with the turn


async def test_an_edited_answer_reuses_the_prompt_only(jobs: Jobs) -> None:
    """The client rewrote turn 1's answer: turn 2's text extends turn 1's prompt only, so it runs on the
    prompt's ids and the rest is tokenized; none of the answer's KV is reused."""
    jobs.shell.specs["m"] = SPEC
    await jobs.command("load", "m", source=LLAMA, tier="resident")
    runtime = jobs.host.runtime("m")
    assert isinstance(runtime, BatchingGenerator)
    history = [ChatMessage("user", "My order number is 4417.")]
    first = await answer(jobs, turn(history))
    history += [ChatMessage("assistant", "Noted."), ChatMessage("user", "What is my order number?")]
    second = await answer(jobs, turn(history))
    assert first.usage is not None
    assert second.usage is not None
    assert second.timings is not None
    assert first.text != "Noted."
    assert second.usage.prompt_tokens == len(runtime.model.encode(template_for(SPEC).render(history)))
    assert second.usage.cached_tokens == first.usage.prompt_tokens
    assert second.timings.prefilled_tokens == second.usage.prompt_tokens - first.usage.prompt_tokens


async def test_an_edited_prompt_falls_back_to_the_common_token_prefix(jobs: Jobs) -> None:
    """The client rewrote turn 1's question: turn 2's text does not extend turn 1's at all, so the whole
    prompt is tokenized as usual and the KV is reused for the token prefix the two share."""
    jobs.shell.specs["m"] = SPEC
    await jobs.command("load", "m", source=LLAMA, tier="resident")
    runtime = jobs.host.runtime("m")
    assert isinstance(runtime, BatchingGenerator)
    first = await answer(jobs, turn([ChatMessage("user", "My order number is 4417.")]))
    history = [ChatMessage("user", "My order number is 9999."), ChatMessage("assistant", first.text)]
    second = await answer(jobs, turn([*history, ChatMessage("user", "What is my order number?")]))
    assert first.usage is not None
    assert second.usage is not None
    assert second.timings is not None
    prompt2 = runtime.model.encode(
        template_for(SPEC).render([*history, ChatMessage("user", "What is my order number?")])
    )
    assert second.usage.prompt_tokens == len(prompt2)
    prompt1 = runtime.model.encode(template_for(SPEC).render([ChatMessage("user", "My order number is 4417.")]))
    shared = next(i for i, (a, b) in enumerate(zip(prompt1, prompt2, strict=False)) if a != b)
    assert 0 < second.usage.cached_tokens == shared < first.usage.prompt_tokens
    assert second.timings.prefilled_tokens == len(prompt2) - shared


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
