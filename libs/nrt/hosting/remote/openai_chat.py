"""The OpenAI chat completions wire format: ``POST {base_url}/chat/completions``, JSON or SSE.

A streamed answer asks for ``stream_options.include_usage``: the endpoint's token usage comes
on a last chunk without choices, after the finish reason, and the stream ends with ``data: [DONE]``.
"""

from __future__ import annotations

from collections.abc import AsyncIterator

import msgspec

from nrt.adapters.bus.errors import BadRequest, RemoteError
from nrt.core.protocol import FinishReason, ResponseFormat, Usage
from nrt.hosting.model_sources import RemoteEndpoint
from nrt.hosting.remote import failures, sse
from nrt.hosting.remote.call import Piece, RemoteCall, usage_of
from nrt.hosting.remote.calls_text import CallsText, calls_answer
from nrt.hosting.remote.openai_tools import tools_fields, wire_messages
from nrt.hosting.remote.transport import RemoteClient

DONE = "[DONE]"


class _PromptDetails(msgspec.Struct):
    cached_tokens: int | None = None


class _Usage(msgspec.Struct):
    prompt_tokens: int = 0
    completion_tokens: int = 0
    prompt_tokens_details: _PromptDetails | None = None

    def usage(self) -> Usage:
        details = self.prompt_tokens_details
        cached = details.cached_tokens if details is not None and details.cached_tokens else 0
        return usage_of(self.prompt_tokens, self.completion_tokens, cached)


class _Function(msgspec.Struct):
    name: str | None = None
    arguments: str | None = None


class _ToolCall(msgspec.Struct):
    index: int = 0
    function: _Function = msgspec.field(default_factory=_Function)


class _Message(msgspec.Struct):
    content: str | None = None
    tool_calls: list[_ToolCall] | None = None

    def text(self) -> str:
        """The answer's text, or its calls in NRT's text format (``nrt.hosting.remote.openai_tools``)."""
        if self.tool_calls:
            return calls_answer([(c.function.name or "", c.function.arguments or "") for c in self.tool_calls])
        return self.content or ""


class _Choice(msgspec.Struct):
    message: _Message = msgspec.field(default_factory=_Message)
    finish_reason: str | None = None


class _Completion(msgspec.Struct):
    choices: list[_Choice] = []
    usage: _Usage | None = None


class _Delta(msgspec.Struct):
    content: str | None = None
    tool_calls: list[_ToolCall] | None = None


class _StreamChoice(msgspec.Struct):
    delta: _Delta = msgspec.field(default_factory=_Delta)
    finish_reason: str | None = None


class _StreamError(msgspec.Struct):
    message: str = ""


class _StreamChunk(msgspec.Struct):
    choices: list[_StreamChoice] = []
    usage: _Usage | None = None
    error: _StreamError | None = None  # an error event in the stream (``data: {"error": {...}}``)


def finish_reason(reason: str) -> FinishReason:
    """The endpoint's finish reason as NRT's: ``length`` when it hit the token limit, else ``stop``."""
    return "length" if reason == "length" else "stop"


def request_body(endpoint: RemoteEndpoint, call: RemoteCall) -> dict[str, object]:
    if call.logprobs:
        raise BadRequest(
            "'logprobs' is not supported by this model's remote endpoint (NRT does not read them back); "
            "send the request without it",
            code="unsupported_parameter",
        )
    body: dict[str, object] = {
        "model": endpoint.model,
        "messages": wire_messages(call.messages)
        if call.has_tools
        else [{"role": m.role, "content": m.content} for m in call.messages],
        "stream": call.stream,
        "max_tokens": call.max_tokens,
        "temperature": call.temperature,
        "top_p": call.top_p,
    }
    if call.stream:
        body["stream_options"] = {"include_usage": True}
    if call.seed is not None:
        body["seed"] = call.seed
    if call.stop:
        body["stop"] = list(call.stop)
    if call.response_format is not None:
        body["response_format"] = response_format_body(call.response_format)
    if call.presence_penalty:
        body["presence_penalty"] = call.presence_penalty
    if call.frequency_penalty:
        body["frequency_penalty"] = call.frequency_penalty
    if call.logit_bias:
        body["logit_bias"] = {str(token): bias for token, bias in call.logit_bias}
    if call.tools is not None:
        body.update(tools_fields(call.tools))
    return body


def response_format_body(response_format: ResponseFormat) -> dict[str, object]:
    """The request's response format as OpenAI's ``response_format``: the endpoint constrains its answer."""
    if response_format.type == "json_object" or response_format.schema is None:
        return {"type": "json_object"}
    schema: object = msgspec.json.decode(response_format.schema)
    return {
        "type": "json_schema",
        "json_schema": {"name": response_format.name or "response", "schema": schema, "strict": True},
    }


async def chat(client: RemoteClient, endpoint: RemoteEndpoint, call: RemoteCall) -> AsyncIterator[Piece]:
    """``call`` answered by ``endpoint``: text pieces as they come, then a last one with the finish and usage."""
    key = endpoint.api_key()
    headers = {"Authorization": f"Bearer {key}"} if key else {}
    url = f"{endpoint.base_url}/chat/completions"
    async with client.post(endpoint, url, headers, request_body(endpoint, call)) as response:
        if not call.stream:
            completion = msgspec.json.decode(await response.aread(), type=_Completion)
            if not completion.choices:
                raise failures.bad_answer(endpoint, "the completion has no choices")
            choice = completion.choices[0]
            usage = completion.usage.usage() if completion.usage is not None else None
            yield Piece(choice.message.text(), finish_reason(choice.finish_reason or "stop"), usage)
            return
        finish: FinishReason | None = None
        usage = None
        calls = CallsText()
        async for data in sse.data_events(response):
            if data.strip() == DONE:
                break
            chunk = msgspec.json.decode(data, type=_StreamChunk)
            if chunk.error is not None:
                raise RemoteError(
                    "remote_failed", f"{failures.where(endpoint)} failed mid-answer: {chunk.error.message}", 502
                )
            if chunk.usage is not None:
                usage = chunk.usage.usage()
            for part in chunk.choices[:1]:
                if part.delta.content and calls.open is None:
                    yield Piece(part.delta.content)
                for tool in part.delta.tool_calls or ():
                    yield Piece(calls.delta(tool.index, tool.function.name, tool.function.arguments))
                if part.finish_reason:
                    finish = finish_reason(part.finish_reason)
        if finish is None:
            raise failures.bad_answer(endpoint, "the stream ended before the answer did (no finish reason)")
        yield Piece(calls.end(), finish, usage)
