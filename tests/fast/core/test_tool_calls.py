"""The tool-call text format (``nrt.core.tool_calls``): written, read back whole or streamed piece by
piece, and the tools' short signatures (``nrt.core.tool_signature``)."""

from __future__ import annotations

import json

import pytest

from nrt.core.protocol import ToolFunction, Tools
from nrt.core.tool_calls import (
    ArgumentsDelta,
    CallStarted,
    TextDelta,
    ToolCallParser,
    ToolEvent,
    calls_text,
    parse_answer,
    result_text,
    tools_prompt,
)
from nrt.core.tool_signature import signature

TWO_CALLS = (
    ' <tool_call>{"name": "add", "arguments": {"a": 1, "b": {"c": "}\\"{"}}}\n<tool_call>{"name": "f", "arguments": {}}'
)


def test_calls_are_read_back_whole() -> None:
    parsed = parse_answer(TWO_CALLS)
    assert parsed.text == ""
    assert [(c.name, c.arguments, c.complete) for c in parsed.calls] == [
        ("add", '{"a": 1, "b": {"c": "}\\"{"}}', True),
        ("f", "{}", True),
    ]


def test_what_is_written_back_is_what_the_model_wrote() -> None:
    parsed = parse_answer(TWO_CALLS)
    assert " " + calls_text((c.name, c.arguments) for c in parsed.calls) == TWO_CALLS
    assert result_text("5") == "<tool_result>5</tool_result>"


@pytest.mark.parametrize("size", [1, 2, 3, 7])
def test_streamed_pieces_give_the_same_calls(size: int) -> None:
    parser = ToolCallParser()
    events: list[ToolEvent] = []
    for i in range(0, len(TWO_CALLS), size):
        events += parser.feed(TWO_CALLS[i : i + size])
    events += parser.finish()
    assert [e for e in events if isinstance(e, CallStarted)] == [CallStarted(0, "add"), CallStarted(1, "f")]
    for index, call in enumerate(parse_answer(TWO_CALLS).calls):
        pieces = [e.text for e in events if isinstance(e, ArgumentsDelta) and e.index == index]
        assert "".join(pieces) == call.arguments
    assert not any(isinstance(e, TextDelta) for e in events)


@pytest.mark.parametrize(
    "text", ["hello", " hello <tool_call>", "<tool", "<to be or not", "", ' <tool_call>{"na', "<tool_call>" + "x" * 300]
)
def test_text_is_text(text: str) -> None:
    parser = ToolCallParser()
    events = [*parser.feed(text), *parser.finish()]
    assert "".join(e.text for e in events if isinstance(e, TextDelta)) == text
    assert parser.calls == []


def test_a_call_cut_short_is_incomplete() -> None:
    parsed = parse_answer('<tool_call>{"name": "add", "arguments": {"a": 1')
    assert [(c.name, c.arguments, c.complete) for c in parsed.calls] == [("add", '{"a": 1', False)]


def test_the_tools_are_described_in_one_short_line_each() -> None:
    schema = {
        "type": "object",
        "properties": {
            "a": {"type": "integer", "minimum": 0, "maximum": 9, "description": "first"},
            "tags": {"type": "array", "items": {"enum": ["x", "y"]}},
            "note": {"type": ["string", "null"], "maxLength": 4},
        },
        "required": ["a"],
    }
    tools = Tools(functions=(ToolFunction(name="add", description="Add", parameters=json.dumps(schema)),))
    assert tools_prompt(tools).splitlines()[1] == (
        'add({a: integer 0..9 /* first */, tags?: ("x"|"y")[], note?: string (at most 4 chars)|null}) - Add'
    )
    assert "one per line" in tools_prompt(tools)
    assert "one per line" not in tools_prompt(Tools(functions=tools.functions, parallel=False))


@pytest.mark.parametrize(
    ("schema", "short"),
    [
        ({"const": 3}, "3"),
        ({"anyOf": [{"type": "integer"}, {"type": "boolean"}]}, "integer|boolean"),
        ({"type": "string", "pattern": "^a+$"}, "string /^a+$/"),
        ({"$ref": "#/$defs/x"}, '{"$ref":"#/$defs/x"}'),
        ({"properties": {"x": {}}}, "{x?: {}}"),
    ],
)
def test_signatures(schema: object, short: str) -> None:
    assert signature(schema) == short
