"""A request's Transcript shaped as Anthropic Messages answers: one Message, or its stream events. Pure.

The router hop is a ``tool_use`` block (``dispatch_to_specialist``, input ``{intent, target}``)
before the text block; a direct answer has the text block only. The stream is Anthropic's
sequence: ``message_start``, each block's ``content_block_start`` / ``content_block_delta``
(``input_json_delta`` for the hop, ``text_delta`` for the text) / ``content_block_stop``,
``message_delta`` with the stop reason and the usage, ``message_stop``; each as
``event: <type>`` and ``data: <json>``.
"""

from __future__ import annotations

from typing import Any

import msgspec

from api_gateway.anthropic_types import (
    ContentBlock,
    ContentBlockDelta,
    ContentBlockStart,
    ContentBlockStop,
    ErrorBody,
    ErrorDetails,
    ErrorEvent,
    InputJsonDelta,
    Message,
    MessageDelta,
    MessageDeltaBody,
    MessageStart,
    MessageStop,
    MessageUsage,
    StopReason,
    StreamEvent,
    TextBlock,
    TextDelta,
    ToolUseBlock,
)
from api_gateway.errors import ApiError
from api_gateway.shaping import TOOL_NAME, Transcript
from nrt.core.tool_calls import ArgumentsDelta, CallStarted, ToolEvent

_encoder = msgspec.json.Encoder()

# Anthropic's error types by HTTP status (https://docs.anthropic.com/en/api/errors)
_ERROR_TYPES = {
    400: "invalid_request_error",
    401: "authentication_error",
    403: "permission_error",
    404: "not_found_error",
    413: "request_too_large",
    429: "rate_limit_error",
    500: "api_error",
    503: "overloaded_error",
    504: "timeout_error",
    529: "overloaded_error",
}


class MessageShape:
    """The Anthropic shapes of one transcript; ``stops`` are the client's ``stop_sequences``."""

    def __init__(self, transcript: Transcript, stops: tuple[str, ...]) -> None:
        self.t, self.stops = transcript, stops
        self._open: int | None = None  # the block being streamed (with client tools)
        self._blocks_opened = 0

    @property
    def id(self) -> str:
        return f"msg_{self.t.request_id}"

    def tool_use(self) -> ToolUseBlock | None:
        """The router hop, when the request was routed and declared no tools of its own (with client
        tools it is only in the ``nrt`` block: a client never sees it as a call to run)."""
        hop = self.t.dispatch_input()
        if hop is None or self.t.tools is not None:
            return None
        return ToolUseBlock(id=f"toolu_{self.t.request_id[:24]}", name=TOOL_NAME, input=hop)

    @property
    def reads_calls(self) -> bool:
        """The answer may be calls of the client's tools (it declared some, under a choice other than none)."""
        return self.t.calls_parser is not None

    def stop(self, calls: bool | None = None) -> tuple[StopReason, str | None]:
        """The stop reason and the client's stop sequence that ended the answer, if one did. ``calls``: the
        answer was tool calls (None: as the streamed answer's calls read so far say)."""
        if self.t.finish_reason() == "length":
            return "max_tokens", None
        if calls is None:
            calls = self.t.calls_parser is not None and bool(self.t.calls_parser.calls)
        if calls:
            return "tool_use", None
        matched = self.t.stop_sequence
        if matched is not None and matched in self.stops:
            return "stop_sequence", matched
        return "end_turn", None  # the end of the answer, or the model's (or the template's) own stop

    def usage(self) -> MessageUsage:
        usage = self.t.usage()
        cached = usage.prompt_tokens_details.cached_tokens if usage.prompt_tokens_details is not None else 0
        return MessageUsage(
            input_tokens=usage.prompt_tokens - cached,
            output_tokens=usage.completion_tokens,
            cache_read_input_tokens=cached,
        )

    def message(self, ended: float) -> Message:
        tool_use = self.tool_use()
        content: list[ContentBlock] = [tool_use] if tool_use is not None else []
        parsed = self.t.parsed()
        calls = parsed is not None and bool(parsed.calls)
        if parsed is not None and calls:
            content += [TextBlock(text=parsed.text)] if parsed.text else []
            content += [
                ToolUseBlock(id=self.t.call_id(i, "toolu_"), name=call.name, input=_input(call.arguments))
                for i, call in enumerate(parsed.calls)
            ]
        else:
            content.append(TextBlock(text=self.t.text))
        stop_reason, stop_sequence = self.stop(calls)
        return Message(
            id=self.id,
            model=self.t.final_model,
            content=content,
            stop_reason=stop_reason,
            stop_sequence=stop_sequence,
            usage=self.usage(),
            nrt=self.t.info(ended),
        )

    # -- stream events --------------------------------------------------------------------

    @property
    def text_index(self) -> int:
        """The text block's index: after the hop's tool_use block, when routed."""
        return 0 if self.t.dispatch is None else 1

    def opening(self) -> list[StreamEvent]:
        """``message_start``, the hop's whole tool_use block (routed), and the text block's start (with client
        tools, blocks start as the answer shows what it is: :meth:`deltas`)."""
        start = Message(
            id=self.id,
            model=self.t.final_model,
            content=[],
            stop_reason=None,
            stop_sequence=None,
            usage=MessageUsage(input_tokens=0, output_tokens=0),  # known at the end: message_delta carries both
        )
        events: list[StreamEvent] = [MessageStart(message=start)]
        tool_use = self.tool_use()
        if tool_use is not None:
            partial = _encoder.encode(tool_use.input).decode()
            events += [
                ContentBlockStart(index=0, content_block=ToolUseBlock(id=tool_use.id, name=tool_use.name, input={})),
                ContentBlockDelta(index=0, delta=InputJsonDelta(partial_json=partial)),
                ContentBlockStop(index=0),
            ]
        if not self.reads_calls:
            events.append(ContentBlockStart(index=self.text_index, content_block=TextBlock(text="")))
        return events

    def text_delta(self, text: str) -> ContentBlockDelta:
        return ContentBlockDelta(index=self.text_index, delta=TextDelta(text=text))

    def deltas(self, text: str) -> list[StreamEvent]:
        """The events the answer's next ``text`` makes: its text's delta, or (with client tools) the blocks it
        opens and fills: a text block, or a ``tool_use`` block per call, its input as ``input_json_delta``."""
        if not self.reads_calls:
            return [self.text_delta(text)]
        return self._blocks(self.t.read_calls(text))

    def _blocks(self, read: list[ToolEvent]) -> list[StreamEvent]:
        events: list[StreamEvent] = []
        for event in read:
            if isinstance(event, CallStarted):
                events += self._close_block()
                block = ToolUseBlock(id=self.t.call_id(event.index, "toolu_"), name=event.name, input={})
                events.append(ContentBlockStart(index=self._blocks_opened, content_block=block))
                self._open = self._blocks_opened
                self._blocks_opened += 1
            elif isinstance(event, ArgumentsDelta):
                assert self._open is not None
                events.append(ContentBlockDelta(index=self._open, delta=InputJsonDelta(partial_json=event.text)))
            else:
                if self._open is None:
                    events.append(ContentBlockStart(index=self._blocks_opened, content_block=TextBlock(text="")))
                    self._open = self._blocks_opened
                    self._blocks_opened += 1
                events.append(ContentBlockDelta(index=self._open, delta=TextDelta(text=event.text)))
        return events

    def _close_block(self) -> list[StreamEvent]:
        if self._open is None:
            return []
        closed, self._open = self._open, None
        return [ContentBlockStop(index=closed)]

    def closing(self, ended: float) -> list[StreamEvent]:
        if self.reads_calls:
            ends = [*self._blocks(self.t.end_calls()), *self._close_block()]
        else:
            ends = [ContentBlockStop(index=self.text_index)]
        stop_reason, stop_sequence = self.stop()
        return [
            *ends,
            MessageDelta(
                delta=MessageDeltaBody(stop_reason=stop_reason, stop_sequence=stop_sequence),
                usage=self.usage(),
                nrt=self.t.info(ended),
            ),
            MessageStop(),
        ]


def _input(arguments: str) -> dict[str, Any]:
    """A call's arguments as its ``tool_use`` block's input: their JSON object (one cut short by
    ``max_tokens`` cannot be read: an empty input; the stop reason says ``max_tokens``)."""
    try:
        value = msgspec.json.decode(arguments)
    except msgspec.DecodeError:
        return {}
    return value if isinstance(value, dict) else {}


def error_type(status: int) -> str:
    return _ERROR_TYPES.get(status, "invalid_request_error" if status < 500 else "api_error")


def error_body(error: ApiError) -> ErrorEvent:
    """An ApiError in Anthropic's shape: ``{"type": "error", "error": {"type", "message", "details"}}``."""
    details = ErrorDetails(error_code=error.code, param=error.param) if error.code is not None else None
    return ErrorEvent(error=ErrorBody(type=error_type(error.status), message=error.message, details=details))


def sse_event(event: StreamEvent | ErrorEvent) -> bytes:
    """One SSE event as Anthropic sends it: ``event: <type>``, ``data: <json>`` and a blank line."""
    data = _encoder.encode(event)
    return b"event: " + _event_type(event) + b"\ndata: " + data + b"\n\n"


def _event_type(event: StreamEvent | ErrorEvent) -> bytes:
    tag = type(event).__struct_config__.tag
    assert isinstance(tag, str)
    return tag.encode()
