"""The Anthropic Messages wire format: ``POST {base_url}/v1/messages``, JSON or SSE.

Headers ``x-api-key`` and ``anthropic-version: 2023-06-01``. System turns go in the top-level
``system`` field; ``max_tokens`` is required. A stream is a sequence of typed events:
``message_start`` (the input token count), ``content_block_start``, ``content_block_delta``
(a ``text_delta`` carries text), ``content_block_stop``, ``message_delta`` (the stop reason and
output token count), ``message_stop``; ``ping`` keeps it alive and ``error`` ends it with a failure.
"""

from __future__ import annotations

import json
from collections.abc import AsyncIterator
from typing import Any

import msgspec

from nrt.adapters.bus.errors import BadRequest
from nrt.core.protocol import FinishReason, ResponseFormat, Usage
from nrt.hosting.model_sources import RemoteEndpoint
from nrt.hosting.remote import failures, sse
from nrt.hosting.remote.anthropic_tools import tools_fields, wire_messages
from nrt.hosting.remote.call import Piece, RemoteCall, usage_of
from nrt.hosting.remote.calls_text import CallsText, calls_answer
from nrt.hosting.remote.transport import RemoteClient

API_VERSION = "2023-06-01"


class _Usage(msgspec.Struct):
    input_tokens: int = 0
    output_tokens: int = 0
    cache_read_input_tokens: int | None = None
    cache_creation_input_tokens: int | None = None

    def prompt_tokens(self) -> int:
        """Every prompt token: Anthropic counts those read from and written to its cache apart."""
        return self.input_tokens + (self.cache_read_input_tokens or 0) + (self.cache_creation_input_tokens or 0)

    def usage(self, output_tokens: int | None = None) -> Usage:
        completion = self.output_tokens if output_tokens is None else output_tokens
        return usage_of(self.prompt_tokens(), completion, self.cache_read_input_tokens or 0)


class _Block(msgspec.Struct):
    type: str
    text: str = ""
    name: str = ""  # tool_use
    input: Any = None  # tool_use: the call's arguments


class _BlockStart(msgspec.Struct):
    index: int
    content_block: _Block


class _Message(msgspec.Struct):
    content: list[_Block] = []
    stop_reason: str | None = None
    usage: _Usage = msgspec.field(default_factory=_Usage)


class _Event(msgspec.Struct):
    type: str


class _MessageStart(msgspec.Struct):
    message: _Message


class _TextDelta(msgspec.Struct):
    type: str
    text: str = ""
    partial_json: str = ""  # input_json_delta: a piece of a tool_use block's input


class _BlockDelta(msgspec.Struct):
    delta: _TextDelta
    index: int = 0


class _StopDelta(msgspec.Struct):
    stop_reason: str | None = None


class _DeltaUsage(msgspec.Struct):
    """``message_delta``'s usage: cumulative counts; the input ones only where the server gives them
    there (a server that learns the prompt's size only at the end, as NRT's own ``/v1/messages``)."""

    output_tokens: int = 0
    input_tokens: int | None = None
    cache_read_input_tokens: int | None = None
    cache_creation_input_tokens: int | None = None

    def update(self, prompt: _Usage) -> _Usage:
        """``prompt`` (from ``message_start``) with the input counts this delta gives instead."""
        given = {
            name: value
            for name in ("input_tokens", "cache_read_input_tokens", "cache_creation_input_tokens")
            if (value := getattr(self, name)) is not None
        }
        return msgspec.structs.replace(prompt, **given) if given else prompt


class _MessageDelta(msgspec.Struct):
    delta: _StopDelta = msgspec.field(default_factory=_StopDelta)
    usage: _DeltaUsage | None = None


class _ErrorDetail(msgspec.Struct):
    type: str = "api_error"
    message: str = ""


class _ErrorEvent(msgspec.Struct):
    error: _ErrorDetail


def finish_reason(stop_reason: str | None) -> FinishReason:
    """Anthropic's stop reason as NRT's: ``max_tokens`` is ``length``; ``end_turn``, ``stop_sequence`` and the rest ``stop``."""
    return "length" if stop_reason == "max_tokens" else "stop"


def request_body(endpoint: RemoteEndpoint, call: RemoteCall) -> dict[str, object]:
    """The Messages API body; a 400 naming an OpenAI sampling field the Messages API has no equivalent for
    (sent on rather than dropped)."""
    for name, value in (
        ("presence_penalty", call.presence_penalty),
        ("frequency_penalty", call.frequency_penalty),
        ("logit_bias", call.logit_bias),
        ("logprobs", call.logprobs),
    ):
        if value:
            raise BadRequest(
                f"'{name}' is not supported by this model's Anthropic endpoint; send the request without it",
                code="unsupported_parameter",
            )
    system = "\n\n".join(m.content for m in call.messages if m.role == "system")
    body: dict[str, object] = {
        "model": endpoint.model,
        "max_tokens": call.max_tokens,
        "messages": wire_messages(tuple(m for m in call.messages if m.role != "system"))
        if call.has_tools
        else [{"role": m.role, "content": m.content} for m in call.messages if m.role != "system"],
        "temperature": call.temperature,
        "stream": call.stream,
    }
    if call.tools is not None:
        body.update(tools_fields(call.tools))
    if system:
        body["system"] = system
    if call.top_p < 1.0:  # only when narrowed: some models take temperature or top_p, not both
        body["top_p"] = call.top_p
    if call.stop:
        body["stop_sequences"] = list(call.stop)
    if call.response_format is not None:
        body["output_config"] = {"format": output_format(call.response_format)}
    return body


def output_format(response_format: ResponseFormat) -> dict[str, object]:
    """The request's response format as Anthropic's ``output_config.format`` (a JSON schema; Anthropic has
    no "any JSON object" format, so ``json_object`` is refused here rather than sent as free text)."""
    if response_format.type != "json_schema" or response_format.schema is None:
        raise BadRequest(
            "response_format json_object is not supported by this model's Anthropic endpoint; "
            "send a json_schema response format",
            code="unsupported_parameter",
        )
    return {"type": "json_schema", "schema": msgspec.json.decode(response_format.schema)}


def headers(endpoint: RemoteEndpoint) -> dict[str, str]:
    key = endpoint.api_key()
    sent = {"anthropic-version": API_VERSION}
    if key:
        sent["x-api-key"] = key
    return sent


async def chat(client: RemoteClient, endpoint: RemoteEndpoint, call: RemoteCall) -> AsyncIterator[Piece]:
    """``call`` answered by ``endpoint``: text pieces as they come, then a last one with the finish and usage."""
    url = f"{endpoint.base_url}/v1/messages"
    async with client.post(endpoint, url, headers(endpoint), request_body(endpoint, call)) as response:
        if not call.stream:
            message = msgspec.json.decode(await response.aread(), type=_Message)
            uses = [
                (b.name, json.dumps(b.input or {}, ensure_ascii=False)) for b in message.content if b.type == "tool_use"
            ]
            text = calls_answer(uses) if uses else "".join(b.text for b in message.content if b.type == "text")
            yield Piece(text, finish_reason(message.stop_reason), message.usage.usage())
            return
        prompt = _Usage()
        stop_reason: str | None = None
        output_tokens = 0
        calls = CallsText()
        async for data in sse.data_events(response):
            kind = msgspec.json.decode(data, type=_Event).type
            if kind == "message_start":
                prompt = msgspec.json.decode(data, type=_MessageStart).message.usage
                output_tokens = prompt.output_tokens
            elif kind == "content_block_start":
                start = msgspec.json.decode(data, type=_BlockStart)
                if start.content_block.type == "tool_use":
                    yield Piece(calls.delta(start.index, start.content_block.name, ""))
            elif kind == "content_block_delta":
                block = msgspec.json.decode(data, type=_BlockDelta)
                delta = block.delta
                if delta.type == "text_delta" and delta.text and calls.open is None:
                    yield Piece(delta.text)
                elif delta.type == "input_json_delta" and delta.partial_json:
                    yield Piece(calls.delta(block.index, None, delta.partial_json))
            elif kind == "message_delta":
                update = msgspec.json.decode(data, type=_MessageDelta)
                stop_reason = update.delta.stop_reason or stop_reason
                if update.usage is not None:
                    output_tokens = update.usage.output_tokens  # cumulative
                    prompt = update.usage.update(prompt)
            elif kind == "message_stop":
                yield Piece(calls.end(), finish_reason(stop_reason), prompt.usage(output_tokens))
                return
            elif kind == "error":
                error = msgspec.json.decode(data, type=_ErrorEvent).error
                raise failures.anthropic_failure(endpoint, error.type, error.message)
            # ping, content_block_stop and event types added later carry nothing to pass on
        raise failures.bad_answer(endpoint, "the stream ended before message_stop")
