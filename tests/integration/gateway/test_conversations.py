"""Conversations through the gateway: the second turn sees the first and prefills only the new
tokens; max_active_sessions evicts the least recently used session's KV, with an event saying why."""

from __future__ import annotations

import asyncio
import time
from collections.abc import AsyncIterator
from pathlib import Path

import pytest
import pytest_asyncio

from harness import Stack, start_stack
from nrt.adapters.inference import BatchingGenerator
from nrt.core.events import RequestRouted, SessionKvEvicted, SessionOpened, SessionTouched
from nrt.core.protocol import ChatMessage
from nrt.hosting.prompts import template_for

pytestmark = pytest.mark.asyncio(loop_scope="module")

# The assistant part writes the answer right after the cue, as the model wrote it (the tiny random
# model's answers do not start with a space), so turn 2's text extends turn 1's prompt and answer.
CONVERSATION = (
    '      template: "Billing desk. Q: {last_user}\\nA:"\n',
    '      template: "Billing desk.\\n\\n{turns}Agent:"\n'
    '      turn_template: {user: "Customer: {content}\\n", assistant: "Agent:{content}\\n\\n"}\n'
    "      max_active_sessions: 2\n",
)


@pytest_asyncio.fixture(scope="module", loop_scope="module")
async def stack(nats_url: str, module_nrt_home: Path) -> AsyncIterator[Stack]:
    async with start_stack(nats_url, "tiny-support.yaml", edit=CONVERSATION) as running:
        yield running


async def test_the_second_turn_uses_the_first_and_prefills_only_new_tokens(stack: Stack) -> None:
    client = stack.client()
    session = {"X-NRT-Session": "two-turns"}
    history = [{"role": "user", "content": "My order number is 4417."}]
    first = await client.chat.completions.create(model="billing", messages=history, extra_headers=session)  # type: ignore[arg-type]
    history += [
        {"role": "assistant", "content": first.choices[0].message.content or ""},
        {"role": "user", "content": "What is my order number?"},
    ]
    second = await client.chat.completions.create(model="billing", messages=history, extra_headers=session)  # type: ignore[arg-type]
    assert first.usage is not None
    assert second.usage is not None
    assert second.usage.prompt_tokens_details is not None
    # the prompt that reached the model is the whole conversation in the manifest's template
    runtime = stack.worker.host.runtime("billing")
    assert isinstance(runtime, BatchingGenerator)
    template = template_for(stack.manifest.model("billing"))
    messages = [ChatMessage(m["role"], m["content"]) for m in history]  # type: ignore[arg-type]
    text1, text2 = template.render(messages[:1]), template.render(messages)
    answer1 = first.choices[0].message.content or ""
    p1, c1 = first.usage.prompt_tokens, first.usage.completion_tokens
    assert p1 == len(runtime.model.encode(text1))
    assert first.choices[0].finish_reason == "length"
    # turn 2's text extends turn 1's prompt and answer: it runs on turn 1's own ids, then the new text's
    assert text2.startswith(text1 + answer1)
    new_text = runtime.model.encode(text2[len(text1 + answer1) :], add_special_tokens=False)
    assert second.usage.prompt_tokens == p1 + c1 + len(new_text)
    # and it started from turn 1's KV, which holds all of turn 1 but the last token chosen (never run
    # through the model): no answer token is prefilled again, only that one and the new text
    cached = second.usage.prompt_tokens_details.cached_tokens
    assert cached == p1 + c1 - 1
    prefilled = second.usage.prompt_tokens - cached
    assert prefilled == second.usage.prompt_tokens - (p1 + c1) + 1 == len(new_text) + 1
    events = await stack.events(until=3)
    touched = [e for e in events if isinstance(e, SessionTouched) and e.session_id == "two-turns"]
    assert [t.reused_tokens for t in touched] == [0, cached]
    assert touched[-1].kv_bytes > touched[0].kv_bytes > 0


async def test_one_session_too_many_evicts_the_least_recently_used(stack: Stack) -> None:
    client = stack.client()
    for session_id in ("limit-a", "limit-b", "limit-c"):  # the manifest holds at most 2 on billing
        await client.chat.completions.create(
            model="billing",
            messages=[{"role": "user", "content": f"hello from {session_id}"}],
            extra_headers={"X-NRT-Session": session_id},
            max_tokens=2,
        )
    events = await stack.events(until=1)
    opened = [e.session_id for e in events if isinstance(e, SessionOpened) and e.session_id.startswith("limit-")]
    assert opened == ["limit-a", "limit-b", "limit-c"]
    # (another test's session, opened before, went first: it was less recently used still)
    evicted = [e for e in events if isinstance(e, SessionKvEvicted) and e.session_id.startswith("limit-")]
    assert [(e.session_id, e.model_id, e.worker_id, e.reason) for e in evicted] == [
        ("limit-a", "billing", "w-gateway", "max_active_sessions"),
    ]
    assert all(e.bytes_freed > 0 for e in evicted)
    assert set(stack.worker.host.get("billing").sessions) == {"limit-b", "limit-c"}


async def routed_turn(stack: Stack, session_id: str, text: str) -> tuple[str, str]:
    """A routed turn of ``session_id``: its request id and the model that answered it."""
    async with stack.http() as http:
        response = await http.post(
            "/v1/chat/completions",
            json={"model": "router", "messages": [{"role": "user", "content": text}], "max_tokens": 2},
            headers={"X-NRT-Session": session_id},
        )
    assert response.status_code == 200, response.text
    return response.headers["x-nrt-request-id"], response.json()["nrt"]["final_model"]


async def test_a_conversation_stays_on_its_specialist_unless_a_new_intent_clears_the_margin(stack: Stack) -> None:
    session_id = "sticky-specialist"
    _, first = await routed_turn(stack, session_id, "I was charged twice for my order")  # billing's example
    assert first == "billing"
    # an unsure turn (no confident intent: the fallback's, for a new conversation) stays on billing once
    # router_svc's view of the log has the conversation's SessionTouched (a moment after the answer)
    assert (await routed_turn(stack, "sticky-new", "what is the weather like on Mars"))[1] == "fallback"
    deadline = time.monotonic() + 10
    while (unsure := await routed_turn(stack, session_id, "what is the weather like on Mars"))[1] != "billing":
        assert unsure[1] == "fallback"
        assert time.monotonic() < deadline, "the conversation never stayed on billing"
        await asyncio.sleep(0.2)
    routed = [e for e in await stack.events(unsure[0], until=2) if isinstance(e, RequestRouted)]
    assert [(e.intent, e.target) for e in routed] == [("billing", "billing")]
    assert "the conversation stays on billing (no confident intent)" in routed[0].rule
    # technical's own example clears the margin: the conversation moves
    moved, target = await routed_turn(stack, session_id, "the app crashes when I open it")
    assert target == "technical"
    routed = [e for e in await stack.events(moved, until=2) if isinstance(e, RequestRouted)]
    assert "left billing" in routed[0].rule
