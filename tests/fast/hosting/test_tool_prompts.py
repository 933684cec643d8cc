"""A request's tools in the prompt the worker renders: described in the system message (merged with the
client's own, or one of their own), a tool's result a user turn, an earlier turn's calls as the model
wrote them, and the whitespace the template shows before an answer written before the calls; and in a
remote endpoint's own shape (OpenAI's, Anthropic's), its calls written back in NRT's. Pure."""

from __future__ import annotations

from nrt.adapters.inference.templates import CHATML, PLAIN_CHAT
from nrt.core.manifest import parse_manifest
from nrt.core.protocol import ChatMessage, GenerateRequest, SamplingParams, ToolFunction, Tools
from nrt.core.tool_calls import parse_answer
from nrt.hosting.model_sources import RemoteEndpoint
from nrt.hosting.prompts import answer_lead, generation_request
from nrt.hosting.remote import anthropic_messages, openai_chat
from nrt.hosting.remote.answer import remote_call
from nrt.hosting.remote.call import RemoteCall
from nrt.hosting.remote.calls_text import CallsText

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
ENDPOINT = RemoteEndpoint(base_url="http://127.0.0.1:9/v1", model="m", protocol="openai")


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


CONVERSATION = (
    ChatMessage("user", "hi"),
    ChatMessage("assistant", CALL + '\n<tool_call>{"name": "add", "arguments": {"a": 1}}'),
    ChatMessage("tool", "3"),
    ChatMessage("tool", "4"),
)


def _remote(tools: Tools | None) -> RemoteCall:
    request = GenerateRequest(
        request_id="r",
        model_id="chat",
        manifest_version=1,
        messages=CONVERSATION,
        params=SamplingParams(max_tokens=5, tools=tools),
    )
    return remote_call(request, None)


def test_an_openai_endpoint_gets_the_tools_and_the_conversation_in_its_own_shape() -> None:
    named = Tools(functions=TOOLS.functions, choice="required", function="add", parallel=False)
    body = openai_chat.request_body(ENDPOINT, _remote(named))
    assert body["tools"] == [
        {"type": "function", "function": {"name": "add", "description": "Add", "parameters": {"type": "object"}}}
    ]
    assert (body["tool_choice"], body["parallel_tool_calls"]) == (
        {"type": "function", "function": {"name": "add"}},
        False,
    )
    assert body["messages"] == [
        {"role": "user", "content": "hi"},
        {
            "role": "assistant",
            "content": None,
            "tool_calls": [
                {"id": "call_1_0", "type": "function", "function": {"name": "add", "arguments": "{}"}},
                {"id": "call_1_1", "type": "function", "function": {"name": "add", "arguments": '{"a": 1}'}},
            ],
        },
        {"role": "tool", "tool_call_id": "call_1_0", "content": "3"},
        {"role": "tool", "tool_call_id": "call_1_1", "content": "4"},
    ]


def test_an_endpoints_streamed_calls_are_written_in_nrts_format() -> None:
    writer = CallsText()
    text = "".join(
        [
            writer.delta(0, "add", ""),
            writer.delta(0, None, '{"a": '),
            writer.delta(0, None, "1}"),
            writer.delta(1, "f", "{}"),
            writer.end(),
        ]
    )
    parsed = parse_answer(text)
    assert [(c.name, c.arguments, c.complete) for c in parsed.calls] == [("add", '{"a": 1}', True), ("f", "{}", True)]


def test_an_anthropic_endpoint_gets_the_tools_and_the_conversation_in_its_own_shape() -> None:
    body = anthropic_messages.request_body(
        RemoteEndpoint(base_url="http://127.0.0.1:9", model="m", protocol="anthropic"), _remote(TOOLS)
    )
    assert body["tools"] == [{"name": "add", "input_schema": {"type": "object"}, "description": "Add"}]
    assert body["tool_choice"] == {"type": "auto", "disable_parallel_tool_use": False}
    assert body["messages"] == [
        {"role": "user", "content": "hi"},
        {
            "role": "assistant",
            "content": [
                {"type": "tool_use", "id": "toolu_1_0", "name": "add", "input": {}},
                {"type": "tool_use", "id": "toolu_1_1", "name": "add", "input": {"a": 1}},
            ],
        },
        {
            "role": "user",
            "content": [
                {"type": "tool_result", "tool_use_id": "toolu_1_0", "content": "3"},
                {"type": "tool_result", "tool_use_id": "toolu_1_1", "content": "4"},
            ],
        },
    ]
