"""An agent framework's real tool loop against the running stack: the OpenAI Agents SDK, its Runner and two
function tools (add and multiply, their arguments bounded as an agent's pydantic types bound them), over
the chat completions API. The first turn must call a tool (``tool_choice: required``); the SDK runs each
call, sends its result back as a ``role: "tool"`` message and asks again (its tool choice reset to
``auto``), until the model answers in text. The tiny model is random: what is checked is the loop's
structure (valid calls executed, their results returned, a text answer ending it), not the arithmetic."""

from __future__ import annotations

from typing import Annotated

import pytest
from agents import Agent, ModelSettings, OpenAIChatCompletionsModel, RunConfig, Runner, function_tool
from agents.items import MessageOutputItem, ToolCallItem, ToolCallOutputItem
from pydantic import Field

from harness import Stack

pytestmark = pytest.mark.asyncio(loop_scope="module")

Digit = Annotated[int, Field(ge=0, le=9)]
executed: list[tuple[str, int, int]] = []


@function_tool
def add(a: Digit, b: Digit) -> int:
    """Add two numbers."""
    executed.append(("add", a, b))
    return a + b


@function_tool
def multiply(a: Digit, b: Digit) -> int:
    """Multiply two numbers."""
    executed.append(("multiply", a, b))
    return a * b


async def test_an_agents_sdk_loop_runs_two_tools_to_a_text_answer(stack: Stack) -> None:
    model = OpenAIChatCompletionsModel(model="fallback", openai_client=stack.client())
    agent = Agent(
        name="calculator",
        instructions="Use the tools.",
        model=model,
        tools=[add, multiply],
        model_settings=ModelSettings(tool_choice="required", parallel_tool_calls=False, max_tokens=120),
    )
    executed.clear()
    result = await Runner.run(
        agent,
        "What is 2 + 3, times 4?",
        max_turns=6,
        run_config=RunConfig(tracing_disabled=True),
    )
    calls = [item for item in result.new_items if isinstance(item, ToolCallItem)]
    outputs = [item for item in result.new_items if isinstance(item, ToolCallOutputItem)]
    assert calls  # the first turn had to call one of the two tools
    assert len(outputs) == len(calls) == len(executed)  # every call ran, and its result went back
    assert {name for name, _, _ in executed} <= {"add", "multiply"}
    assert all(0 <= a <= 9 and 0 <= b <= 9 for _, a, b in executed)  # valid against the declared schemas
    assert len(result.raw_responses) >= 2  # a model turn per step of the loop: the calls, then the text
    assert isinstance(result.new_items[-1], MessageOutputItem)  # the loop ended with the model's text
    assert isinstance(result.final_output, str)
    assert not result.final_output.lstrip().startswith("<tool_call>")
