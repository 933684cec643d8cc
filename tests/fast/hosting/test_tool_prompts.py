"""A request's tools in the prompt the worker renders: described in the system message (merged with the
client's own, or one of their own), a tool's result a user turn, an earlier turn's calls as the model
wrote them, and the whitespace the template shows before an answer written before the calls. Pure."""

from __future__ import annotations

import pytest

from nrt.adapters.bus.errors import RemoteError
from nrt.adapters.inference.templates import CHATML, PLAIN_CHAT
from nrt.core.manifest import parse_manifest
from nrt.core.protocol import ChatMessage, GenerateRequest, SamplingParams, ToolFunction, Tools
from nrt.hosting.prompts import answer_lead, generation_request
from nrt.hosting.remote.answer import remote_call

MANIFEST = parse_manifest(
    """
cluster: tools
models:
  router: {source: catalogue://tiny-llama, tier: resident}
  specialists:
    - {id: chat, source: catalogue://tiny-llama, tier: resident}
routing: {entry: router, dispatch_rule: router.output.intent -> specialists.chat}
"""
)
TOOLS = Tools(functions=(ToolFunction(name="add", description="Add", parameters='{"type": "object"}'),))
CALL = '<tool_call>{"name": "add", "arguments": {}}'


def _prompt(*messages: ChatMessage, tools: Tools | None = TOOLS) -> str:
    request = GenerateRequest(
        request_id="r", model_id="chat", manifest_version=1, messages=messages, params=SamplingParams(tools=tools)
    )
    engine = generation_request(request, MANIFEST.model("chat"), None)
    assert engine.tools == tools
    assert engine.answer_lead == " "
    return engine.prompt


def test_the_tools_are_described_in_the_system_message() -> None:
    alone = _prompt(ChatMessage("user", "hi"))
    assert alone.startswith("Tools (call one: <tool_call>")
    assert "\nadd({}) - Add\n\nUser: hi\nAssistant:" in alone
    merged = _prompt(ChatMessage("system", "Be brief."), ChatMessage("user", "hi"))
    assert merged.startswith("Be brief.\n\nTools (")
    assert _prompt(ChatMessage("user", "hi"), tools=None) == "User: hi\nAssistant:"


def test_a_conversation_with_calls_and_results_extends_the_turn_before() -> None:
    first = _prompt(ChatMessage("user", "hi"))
    second = _prompt(ChatMessage("user", "hi"), ChatMessage("assistant", CALL), ChatMessage("tool", "3"))
    assert second.startswith(first + " " + CALL)  # the answer, with the lead the grammar wrote before it
    assert second.endswith("User: <tool_result>3</tool_result>\nAssistant:")


def test_the_answer_lead_of_templates() -> None:
    assert answer_lead(PLAIN_CHAT) == " "
    assert answer_lead(CHATML) == ""


@pytest.mark.parametrize(
    ("messages", "tools"),
    [((ChatMessage("user", "hi"),), TOOLS), ((ChatMessage("user", "hi"), ChatMessage("tool", "3")), None)],
)
def test_a_remote_model_refuses_tools_clearly(messages: tuple[ChatMessage, ...], tools: Tools | None) -> None:
    request = GenerateRequest(
        request_id="r", model_id="chat", manifest_version=1, messages=messages, params=SamplingParams(tools=tools)
    )
    with pytest.raises(RemoteError) as caught:
        remote_call(request, None)
    assert (caught.value.status, caught.value.code) == (400, "unsupported_parameter")
    assert "remote models" in caught.value.message
