"""A request's frames shaped as OpenAI responses: one JSON completion or SSE chunks. Pure.

The router hop is shown as a ``dispatch_to_specialist`` tool call (arguments: intent,
target) on the assistant message, next to the specialist's answer; the ``nrt`` block
names the entry and final models, the intent, every hop with its latency and time to
first token, and the breakdown of the request's time into transits and each service's own
work. Times are passed in by the caller: ``time.perf_counter()`` seconds for the gateway's
own durations, unix seconds (``wall``) where they meet the other services' stamps.
"""

from __future__ import annotations

import msgspec

from api_gateway.errors import ApiError
from api_gateway.openai_types import (
    Breakdown,
    ChatCompletion,
    ChatCompletionChunk,
    Choice,
    ChoiceLogprobs,
    ChunkChoice,
    Delta,
    FunctionCall,
    FunctionFragment,
    Hop,
    NrtInfo,
    PromptTokensDetails,
    ResponseMessage,
    ToolCall,
    ToolCallFragment,
    Usage,
)
from nrt.core.protocol import Dispatch, FinishReason, GenerateChunk, TokenLogprob, Tools
from nrt.core.tool_calls import ArgumentsDelta, CallStarted, TextDelta, ToolCallParser, ToolEvent, parse_answer

TOOL_NAME = "dispatch_to_specialist"
SSE_DONE = b"data: [DONE]\n\n"
SSE_HEADERS = {"Cache-Control": "no-cache", "X-Accel-Buffering": "no"}  # every event stream's, both APIs

_encoder = msgspec.json.Encoder()


def _ms(seconds: float) -> float:
    return round(seconds * 1000.0, 3)


def _span(since: float | None, until: float | None) -> float | None:
    """Milliseconds between two unix times (of two processes' clocks: never below 0), if both are known."""
    return _ms(max(0.0, until - since)) if since is not None and until is not None else None


class Transcript:
    """Everything one request has received so far, and its shapes."""

    def __init__(
        self,
        *,
        request_id: str,
        model: str,
        routed: bool,
        manifest_version: int,
        session_id: str | None,
        started: float,
        created: int,
        started_wall: float = 0.0,
        tools: Tools | None = None,
    ) -> None:
        self.request_id, self.model, self.routed = request_id, model, routed
        self.manifest_version, self.session_id = manifest_version, session_id
        self.started, self.created = started, created
        self.started_wall = started_wall  # unix time the request was received
        self.sent_at = started  # when the request left for the router (set by the caller)
        self.sent_wall = started_wall  # the same, unix time
        self.dispatch: Dispatch | None = None
        self.first_token_at: float | None = None
        self.last_at: float | None = None
        self.first_wall: float | None = None  # unix time the first chunk arrived
        self.last_wall: float | None = None  # and the last
        self.parts: list[str] = []
        self.logprobs: list[TokenLogprob] = []  # the answer tokens' (when the request asked for them)
        self._logprobs_sent = 0  # how many of them SSE chunks have carried
        self.first: GenerateChunk | None = None
        self.last: GenerateChunk | None = None
        # the client's tools: the answer is read as text or calls (not under tool_choice none)
        self.tools = tools
        self.calls_parser = ToolCallParser() if tools is not None and tools.choice != "none" else None

    def call_id(self, index: int, prefix: str = "call_") -> str:
        """The id of the answer's ``index``-th tool call (``call_...``; Anthropic's ``toolu_...``):
        the request's id and the call's index, unique and the same in every shape of the answer."""
        return f"{prefix}{self.request_id[:24]}_{index}"

    def read_calls(self, text: str) -> list[ToolEvent]:
        """The answer's next ``text`` as text and tool-call events (streaming; one text event without tools)."""
        if self.calls_parser is None:
            return [TextDelta(text)] if text else []
        return self.calls_parser.feed(text)

    def end_calls(self) -> list[ToolEvent]:
        """The events the end of the answer releases (text held back while deciding whether it was calls)."""
        return self.calls_parser.finish() if self.calls_parser is not None else []

    def parsed(self) -> ToolCallParser | None:
        """The whole answer read as text or calls (None: the request declared no tools to call)."""
        return parse_answer(self.text) if self.calls_parser is not None else None

    @property
    def id(self) -> str:
        return f"chatcmpl-{self.request_id}"

    @property
    def fingerprint(self) -> str:
        return f"nrt-manifest-v{self.manifest_version}"

    @property
    def final_model(self) -> str:
        return self.dispatch.target if self.dispatch is not None else self.model

    @property
    def text(self) -> str:
        return "".join(self.parts)

    @property
    def finished(self) -> bool:
        return self.last is not None and self.last.finish_reason is not None

    def on_chunk(self, chunk: GenerateChunk, at: float, wall: float) -> str:
        """Record ``chunk``, received at ``at`` (perf counter) and ``wall`` (unix time); returns the text it adds.

        The first chunk of a routed answer carries the router's decision (``route``)."""
        if chunk.route is not None:
            self.dispatch = chunk.route
        if self.first is None:
            self.first, self.first_token_at, self.first_wall = chunk, at, wall
        self.last, self.last_at, self.last_wall = chunk, at, wall
        if chunk.text:
            self.parts.append(chunk.text)
        self.logprobs.extend(chunk.logprobs)
        return chunk.text

    def _unsent_logprobs(self) -> ChoiceLogprobs | None:
        """The token log-probabilities received since the last chunk that carried some (None: none)."""
        if len(self.logprobs) == self._logprobs_sent:
            return None
        unsent, self._logprobs_sent = self.logprobs[self._logprobs_sent :], len(self.logprobs)
        return ChoiceLogprobs(content=unsent)

    # -- pieces ---------------------------------------------------------------------------

    def tool_call(self) -> ToolCall | None:
        """The router hop as a tool call, when the request was routed and declared no tools of its own
        (with client tools, the hop is only in the ``nrt`` block: a client never sees it as a call to run)."""
        hop = self.dispatch_input()
        if hop is None or self.tools is not None:
            return None
        arguments = _encoder.encode(hop).decode()
        return ToolCall(id=f"call_{self.request_id[:24]}", function=FunctionCall(name=TOOL_NAME, arguments=arguments))

    def usage(self) -> Usage:
        usage = self.last.usage if self.last is not None else None
        if usage is None:
            return Usage(prompt_tokens=0, completion_tokens=0, total_tokens=0)
        return Usage(
            prompt_tokens=usage.prompt_tokens,
            completion_tokens=usage.completion_tokens,
            total_tokens=usage.total_tokens,
            prompt_tokens_details=PromptTokensDetails(cached_tokens=usage.cached_tokens),
        )

    def hops(self) -> list[Hop]:
        hops = []
        dispatch = self.dispatch
        if dispatch is not None:
            hops.append(
                Hop(
                    role="router",
                    model=dispatch.entry_model,
                    worker_id=dispatch.router_worker_id,
                    latency_ms=round(dispatch.router_ms, 3),
                    compute_ms=dispatch.router_compute_ms,
                )
            )
        # from the dispatch (router_svc's clock) or the gateway's send, to the chunks' arrival (unix times)
        begin = dispatch.sent_at if dispatch is not None and dispatch.sent_at is not None else self.sent_wall
        last, first = self.last, self.first
        timings = last.timings if last is not None else None
        hops.append(
            Hop(
                role="specialist",
                model=self.final_model,
                worker_id=last.worker_id if last is not None else None,
                latency_ms=_ms(max(0.0, (self.last_wall or begin) - begin)),
                ttft_ms=_ms(max(0.0, self.first_wall - begin)) if self.first_wall is not None else None,
                compute_ms=timings.total_ms if timings is not None else None,
                cold_start_ms=first.cold_start_ms if first is not None else None,
                own_ttft_ms=_span(first.received_at, first.sent_at) if first is not None else None,
            )
        )
        return hops

    def breakdown(self, ended: float) -> Breakdown:
        """The request's time split into transits and each service's own work (see ``Breakdown``)."""
        dispatch, first, last = self.dispatch, self.first, self.last
        forwarded = dispatch.sent_at if dispatch is not None else self.sent_wall
        return Breakdown(
            gateway_in_ms=_ms(self.sent_at - self.started),
            to_router_ms=_span(self.sent_wall, dispatch.received_at) if dispatch is not None else None,
            router_ms=_span(dispatch.received_at, dispatch.sent_at) if dispatch is not None else None,
            to_worker_ms=_span(forwarded, first.received_at) if first is not None else None,
            worker_first_ms=_span(first.received_at, first.sent_at) if first is not None else None,
            worker_ms=_span(last.received_at, last.sent_at) if last is not None else None,
            first_back_ms=_span(first.sent_at, self.first_wall) if first is not None else None,
            back_ms=_span(last.sent_at, self.last_wall) if last is not None else None,
            gateway_out_ms=_ms(ended - (self.last_at if self.last_at is not None else ended)),
            total_ms=_ms(ended - self.started),
        )

    def info(self, ended: float) -> NrtInfo:
        dispatch = self.dispatch
        return NrtInfo(
            request_id=self.request_id,
            manifest_version=self.manifest_version,
            routed=self.routed,
            entry_model=dispatch.entry_model if dispatch is not None else self.model,
            final_model=self.final_model,
            intent=dispatch.intent if dispatch is not None else None,
            confidence=dispatch.confidence if dispatch is not None else None,
            scores=dispatch.scores if dispatch is not None else {},
            rule=dispatch.rule if dispatch is not None else "direct",
            session_id=self.session_id,
            hops=self.hops(),
            latency_ms=_ms(ended - self.started),
            ttft_ms=_ms(self.first_token_at - self.started) if self.first_token_at is not None else None,
            breakdown=self.breakdown(ended),
        )

    def finish_reason(self) -> FinishReason:
        return (self.last.finish_reason if self.last is not None else None) or "stop"

    @property
    def stop_sequence(self) -> str | None:
        """The stop sequence that ended the answer (the client's, the manifest's or the template's), if one did."""
        return self.last.stop_sequence if self.last is not None else None

    def dispatch_input(self) -> dict[str, str | None] | None:
        """The router hop as the ``dispatch_to_specialist`` tool's input, when the request was routed."""
        if self.dispatch is None:
            return None
        return {"intent": self.dispatch.intent, "target": self.dispatch.target}

    # -- one JSON response ----------------------------------------------------------------

    def completion(self, ended: float) -> ChatCompletion:
        tool_call = self.tool_call()
        message = ResponseMessage(
            role="assistant", content=self.text, tool_calls=[tool_call] if tool_call is not None else None
        )
        finish_reason: str = self.finish_reason()
        parsed = self.parsed()
        if parsed is not None and parsed.calls:
            calls = [
                ToolCall(id=self.call_id(i), function=FunctionCall(name=call.name, arguments=call.arguments))
                for i, call in enumerate(parsed.calls)
            ]
            message = ResponseMessage(role="assistant", content=parsed.text or None, tool_calls=calls)
            finish_reason = "tool_calls" if finish_reason == "stop" else finish_reason
        return ChatCompletion(
            id=self.id,
            created=self.created,
            model=self.final_model,
            choices=[
                Choice(
                    index=0,
                    message=message,
                    finish_reason=finish_reason,
                    logprobs=ChoiceLogprobs(content=self.logprobs) if self.logprobs else None,
                )
            ],
            usage=self.usage(),
            system_fingerprint=self.fingerprint,
            nrt=self.info(ended),
        )

    # -- SSE chunks -----------------------------------------------------------------------

    def _chunk(
        self, delta: Delta, finish_reason: str | None = None, logprobs: ChoiceLogprobs | None = None
    ) -> ChatCompletionChunk:
        return ChatCompletionChunk(
            id=self.id,
            object="chat.completion.chunk",
            created=self.created,
            model=self.final_model,
            system_fingerprint=self.fingerprint,
            choices=[ChunkChoice(index=0, delta=delta, finish_reason=finish_reason, logprobs=logprobs)],
        )

    def opening_chunk(self) -> ChatCompletionChunk:
        """The assistant role, with the router hop's tool call when the request was routed."""
        call = self.tool_call()
        tool_calls = (
            [
                ToolCallFragment(
                    index=0,
                    id=call.id,
                    type="function",
                    function=FunctionFragment(name=call.function.name, arguments=call.function.arguments),
                )
            ]
            if call is not None
            else None
        )
        return self._chunk(Delta(role="assistant", content="", tool_calls=tool_calls))

    def content_chunk(self, text: str) -> ChatCompletionChunk:
        return self._chunk(Delta(content=text), logprobs=self._unsent_logprobs())

    def content_chunks(self, text: str) -> list[ChatCompletionChunk]:
        """The chunks the answer's next ``text`` makes: its text, or its tool calls' pieces (OpenAI's
        ``delta.tool_calls``: the call's index, id and name first, then its arguments as they come)."""
        if self.calls_parser is None:
            return [self.content_chunk(text)]
        return [self._event_chunk(event) for event in self.read_calls(text)]

    def _event_chunk(self, event: ToolEvent) -> ChatCompletionChunk:
        if isinstance(event, CallStarted):
            fragment = ToolCallFragment(
                index=event.index,
                id=self.call_id(event.index),
                type="function",
                function=FunctionFragment(name=event.name, arguments=""),
            )
            return self._chunk(Delta(tool_calls=[fragment]))
        if isinstance(event, ArgumentsDelta):
            fragment = ToolCallFragment(index=event.index, function=FunctionFragment(arguments=event.text))
            return self._chunk(Delta(tool_calls=[fragment]))
        return self._chunk(Delta(content=event.text), logprobs=self._unsent_logprobs())

    def closing_chunks(self, ended: float, include_usage: bool) -> list[ChatCompletionChunk]:
        """The finish reason with the ``nrt`` block; usage on it, or on a separate last chunk
        with no choices when the client asked for ``stream_options.include_usage`` (as OpenAI does).
        Before them, what the end of the answer releases (text held back while reading for calls)."""
        released = [self._event_chunk(event) for event in self.end_calls()]
        finish_reason: str = self.finish_reason()
        if self.calls_parser is not None and self.calls_parser.calls and finish_reason == "stop":
            finish_reason = "tool_calls"
        closing = self._chunk(Delta(), finish_reason, self._unsent_logprobs())
        closing.nrt = self.info(ended)
        if not include_usage:
            closing.usage = self.usage()
            return [*released, closing]
        usage_only = ChatCompletionChunk(
            id=self.id,
            object="chat.completion.chunk",
            created=self.created,
            model=self.final_model,
            system_fingerprint=self.fingerprint,
            choices=[],
            usage=self.usage(),
        )
        return [*released, closing, usage_only]


def sse(chunk: ChatCompletionChunk) -> bytes:
    """One SSE event: ``data: <json>`` and a blank line (LF line ends, as OpenAI sends)."""
    return b"data: " + _encoder.encode(chunk) + b"\n\n"


def sse_error(error: ApiError) -> bytes:
    """An error event the OpenAI clients raise on: ``data: {"error": {...}}``."""
    return b"data: " + _encoder.encode(error.body()) + b"\n\n"
