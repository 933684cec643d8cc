"""Client tools in the models' text: how a tool call, a tool's result and the declared tools are written,
and the parser that reads an answer's calls back, streamed or whole. Pure.

The tiny models and Gemma 3 have no native tool format, so NRT writes one, the same for every model:

- the declared tools are described in a system message (:func:`tools_prompt`): each function's name,
  its parameters as a short signature (``nrt.core.tool_signature``) and its description, one line each;
- a call is a line ``<tool_call>{"name": "add", "arguments": {"a": 1, "b": 2}}``: the JSON written as the
  grammar writes it (``", "`` and ``": "`` separators, properties in the schema's order); several calls
  (``parallel_tool_calls``) are such lines joined by a newline. The worker constrains the answer to this
  shape (``nrt.adapters.inference.grammar.tools_grammar``): under ``required`` it is calls only, under
  ``auto`` either free text or calls, under ``none`` free text;
- an earlier turn's calls are written back exactly so (:func:`calls_text`), and a tool's result is a
  turn ``<tool_result>...</tool_result>`` (:func:`result_text`), so the next turn's prompt extends the
  last one's text and a session's KV cache is reused.

The gateway parses the answer's text (:class:`ToolCallParser`) into the API's tool calls; the worker only
writes text, so the wire, router_svc and the session transcripts are unchanged by tools.
"""

from __future__ import annotations

import re
from collections.abc import Iterable

import msgspec

from nrt.core.protocol import Tools
from nrt.core.tool_signature import signature

CALL_OPEN = "<tool_call>"
RESULT_OPEN, RESULT_CLOSE = "<tool_result>", "</tool_result>"
CALL_SEPARATOR = "\n"
_HEADER = re.compile(r'\{\s*"name"\s*:\s*"((?:[^"\\]|\\.)*)"\s*,\s*"arguments"\s*:\s*')
_MAX_HEADER = 256 + len(CALL_OPEN)  # a call's header longer than this is no header: the answer is text


def call_header(name: str) -> str:
    """A call's text up to its arguments: ``<tool_call>{"name": "add", "arguments": ``."""
    return f'{CALL_OPEN}{{"name": {msgspec.json.encode(name).decode()}, "arguments": '


def call_text(name: str, arguments: str) -> str:
    """One call as the model writes it; ``arguments``: the JSON text of its arguments, verbatim."""
    return f"{call_header(name)}{arguments or '{}'}}}"


def calls_text(calls: Iterable[tuple[str, str]]) -> str:
    """An earlier answer's calls ``(name, arguments)`` as the model wrote them."""
    return CALL_SEPARATOR.join(call_text(name, arguments) for name, arguments in calls)


def result_text(content: str) -> str:
    """A tool's result, as the turn that brings it back to the model."""
    return f"{RESULT_OPEN}{content}{RESULT_CLOSE}"


def tools_prompt(tools: Tools) -> str:
    """The system text that describes the declared tools and how to call them: short, as a small model's
    context is (one line a tool: its name, its parameters' signature, its description)."""
    several = ", one per line" if tools.parallel else ""
    lines = [f'Tools (call one: {CALL_OPEN}{{"name": ..., "arguments": {{...}}}}{several}):']
    for function in tools.functions:
        described = f" - {function.description}" if function.description else ""
        lines.append(f"{function.name}({signature(msgspec.json.decode(function.parameters))}){described}")
    return "\n".join(lines)


class TextDelta(msgspec.Struct, frozen=True):
    text: str


class CallStarted(msgspec.Struct, frozen=True):
    index: int
    name: str


class ArgumentsDelta(msgspec.Struct, frozen=True):
    index: int
    text: str


ToolEvent = TextDelta | CallStarted | ArgumentsDelta


class ParsedCall(msgspec.Struct):
    name: str
    arguments: str = ""
    complete: bool = False  # its arguments' JSON closed (a call cut by max_tokens is not)


class ToolCallParser:
    """Reads an answer's text, piece by piece, as free text or as tool calls (:data:`ToolEvent`).

    An answer is calls when it starts with ``<tool_call>`` (text held back until that is decided);
    within a call, the name comes once its header is complete, then the arguments' JSON as it arrives.
    """

    def __init__(self) -> None:
        self.text = ""  # the free text (an answer that is not calls)
        self.calls: list[ParsedCall] = []
        self._mode = "undecided"  # undecided | text | header | arguments | closing | between
        self._buffer = ""
        self._opening = ""  # the text that opened the call being read (its marker, the space before it)
        self._depth = 0
        self._in_string = False
        self._escaped = False

    def feed(self, piece: str) -> list[ToolEvent]:
        """The events ``piece`` (the answer's next text) completes."""
        events: list[ToolEvent] = []
        self._buffer += piece
        while self._buffer:
            before = (self._mode, len(self._buffer))
            self._step(events)
            if (self._mode, len(self._buffer)) == before:
                break  # waiting for more text
        return events

    def finish(self) -> list[ToolEvent]:
        """The events the end of the answer releases (text held back while undecided)."""
        if self._mode in ("undecided", "header") and not self.calls:  # no call after all: it was text
            held = (self._opening if self._mode == "header" else "") + self._buffer
            self._buffer, self._mode = "", "text"
            if held:
                self.text += held
                return [TextDelta(held)]
        return []

    def _step(self, events: list[ToolEvent]) -> None:
        mode = self._mode
        if mode == "text":
            events.append(TextDelta(self._buffer))
            self.text += self._buffer
            self._buffer = ""
        elif mode in ("undecided", "between"):
            self._expect_open(events)
        elif mode == "header":
            self._read_header(events)
        elif mode == "arguments":
            self._read_arguments(events)
        elif mode == "closing":
            self._close_call()

    def _expect_open(self, events: list[ToolEvent]) -> None:
        buffer = self._buffer.lstrip()  # the template's space before an answer, a newline between calls
        if buffer.startswith(CALL_OPEN):
            self._opening = self._buffer[: len(self._buffer) - len(buffer) + len(CALL_OPEN)]
            self._buffer, self._mode = buffer[len(CALL_OPEN) :], "header"
        elif not CALL_OPEN.startswith(buffer):  # not a call: text (at the start) or what follows the calls
            if self._mode == "undecided":
                self._mode = "text"
            else:
                self._buffer = ""  # the grammar allows nothing after the calls; ignore stray text
        elif self._mode == "between":
            self._buffer = buffer  # a prefix of the marker: wait (text kept while undecided)

    def _read_header(self, events: list[ToolEvent]) -> None:
        match = _HEADER.match(self._buffer)
        if match is None or match.end() == len(self._buffer):  # (the arguments' leading spaces may follow)
            if len(self._buffer) > _MAX_HEADER and not self.calls:
                self._buffer, self._mode = self._opening + self._buffer, "text"
            return
        name = msgspec.json.decode(f'"{match.group(1)}"'.encode(), type=str)
        self.calls.append(ParsedCall(name=name))
        events.append(CallStarted(len(self.calls) - 1, name))
        self._buffer, self._mode = self._buffer[match.end() :], "arguments"
        self._depth, self._in_string, self._escaped = 0, False, False

    def _read_arguments(self, events: list[ToolEvent]) -> None:
        call, index = self.calls[-1], len(self.calls) - 1
        end = self._arguments_end(self._buffer)
        part = self._buffer if end is None else self._buffer[:end]
        if part:
            call.arguments += part
            events.append(ArgumentsDelta(index, part))
        if end is None:
            self._buffer = ""
            return
        call.complete = True
        self._buffer, self._mode = self._buffer[end:], "closing"

    def _close_call(self) -> None:
        """The call's own closing brace, after its arguments."""
        rest = self._buffer.lstrip()
        if rest:
            self._buffer, self._mode = (rest[1:] if rest.startswith("}") else rest), "between"
        else:
            self._buffer = ""

    def _arguments_end(self, text: str) -> int | None:
        """Where the arguments' JSON value ends in ``text`` (None: not yet), following its nesting."""
        for i, char in enumerate(text):
            if self._in_string:
                if self._escaped:
                    self._escaped = False
                elif char == "\\":
                    self._escaped = True
                elif char == '"':
                    self._in_string = False
                    if self._depth == 0:
                        return i + 1
            elif char == '"':
                self._in_string = True
            elif char in "{[":
                self._depth += 1
            elif char in "}]":
                if self._depth == 0:
                    return i  # a scalar's end: the call's own brace
                self._depth -= 1
                if self._depth == 0:
                    return i + 1
        return None


def parse_answer(text: str) -> ToolCallParser:
    """A whole answer parsed (``parser.text`` and ``parser.calls``)."""
    parser = ToolCallParser()
    parser.feed(text)
    parser.finish()
    return parser
