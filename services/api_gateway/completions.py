"""``POST /v1/chat/completions``: admit, route over the bus, answer as JSON or SSE.

Each request: shape checks (400) -> admission (waits out a manifest swap, else 503) ->
model check against the admitted manifest (404) -> ``RequestAdmitted`` -> the
RouteRequest to router_svc -> frames back on the request's inbox. The HTTP answer
starts only when the first token (or an error) arrives, so an error the worker reports
before answering, such as a prompt beyond the context window, is a proper 4xx even for
a streaming request; after that, errors become an SSE error event. Every admitted
request ends with exactly one ``RequestCompleted`` or ``RequestFailed``, under the
manifest version it was admitted with. A request whose worker is lost before any of its
answer came is sent once more (to a live worker, or answered 503 at once); a client that
goes away has its generation cancelled on the worker (``nrt.requests.cancel``).
"""

from __future__ import annotations

import asyncio
import time
import uuid
from collections.abc import AsyncIterator
from typing import Any

from litestar import Request, Response, post
from litestar.di import NamedDependency
from litestar.openapi import ResponseSpec
from litestar.params import JSONBody
from litestar.response import Stream
from opentelemetry import trace
from opentelemetry.trace import Span, SpanKind, Status, StatusCode

from api_gateway.auth import caller_key_id, infer_key
from api_gateway.errors import ApiError
from api_gateway.exchange import WORKER_LOST, RouteExchange, require_serving
from api_gateway.openai_types import ChatCompletion, ChatCompletionRequest, ErrorResponse
from api_gateway.openapi_docs import KEYED, ChatOperation, errors
from api_gateway.runtime import Bus, Runtime
from api_gateway.shaping import SSE_DONE, Transcript, sse, sse_error
from api_gateway.validate import SESSION_HEADER, ChatCall, check_model, validate_chat
from nrt.bus import rpc, subjects, tracing
from nrt.bus.errors import RemoteError
from nrt.events import RequestAdmitted, RequestCompleted, RequestFailed
from nrt.metrics import DIRECT, UNROUTED, route_outcome
from nrt.protocol import Cancel, InboxFrame, RouteRequest

tracer = trace.get_tracer("api_gateway")

SSE_HEADERS = {"Cache-Control": "no-cache", "X-Accel-Buffering": "no"}
CLIENT_GONE = 499
RETRIES = 1  # times a request whose worker was lost before answering is sent again
_cancels: set[asyncio.Task[None]] = set()  # cancels on their way to the workers


class Flight:
    """One admitted request: its transcript, its exchange, and the one event that ends it."""

    def __init__(
        self,
        runtime: NamedDependency[Runtime],
        bus: Bus,
        call: ChatCall,
        transcript: Transcript,
        span: Span,
        key_id: str | None,
    ) -> None:
        self.runtime, self.bus, self.call, self.transcript, self.span = runtime, bus, call, transcript, span
        self.key_id = key_id  # the API key the usage is recorded for (None: authentication is off)
        self.exchange = RouteExchange(bus.nc, bus.inboxes, runtime.settings)
        self.ended = False
        self.route: RouteRequest | None = None
        self.retries = RETRIES

    async def start(self) -> None:
        t = self.transcript
        self.bus.emitter.emit(
            RequestAdmitted(
                request_id=t.request_id,
                manifest_version=t.manifest_version,
                model_id=self.call.model,
                session_id=self.call.session_id,
                stream=self.call.stream,
                key_id=self.key_id,
            )
        )
        route = RouteRequest(
            request_id=t.request_id,
            manifest_version=t.manifest_version,
            model=self.call.model,
            messages=self.call.messages,
            params=self.call.params,
            session_id=self.call.session_id,
            stream=self.call.stream,
            deadline=self.exchange.deadline,
        )
        if not t.routed:  # no live worker serves it: 503 at once, not after a timeout
            require_serving(self.bus.follower.state, self.call.model)
        t.sent_at, t.sent_wall = time.perf_counter(), time.time()
        await self._send(route)

    async def _send(self, route: RouteRequest) -> None:
        self.route = route
        await self.exchange.open(route)
        if not self.transcript.routed:
            self.exchange.expect(self.call.model)

    async def _next_chunk(self) -> InboxFrame | None:
        """The exchange's next chunk; sent again once when its worker was lost before answering."""
        while True:
            try:
                return await self.exchange.next()
            except RemoteError as exc:
                if exc.code != WORKER_LOST or self.exchange.frames > 0 or self.retries <= 0 or self.route is None:
                    raise
            self.retries -= 1
            self.span.add_event("retry", {"reason": WORKER_LOST})
            self.exchange.close()  # frames still coming for the first attempt are dropped
            self.exchange = RouteExchange(self.bus.nc, self.bus.inboxes, self.runtime.settings)
            await self._send(self.route)

    async def next_text(self) -> str | None:
        """The text of the next chunk ('' for a chunk without text); None at the end."""
        chunk = await self._next_chunk()
        if chunk is None:
            return None
        if chunk.route is not None:  # the first chunk of a routed answer: the router's decision
            self.span.set_attribute("nrt.intent", chunk.route.intent or "")
            self.span.set_attribute("nrt.target", chunk.route.target)
        previous, now = self.transcript.last_at, time.perf_counter()
        text = self.transcript.on_chunk(chunk, now, time.time())
        if text and previous is not None:
            self.runtime.metrics.inter_token.labels(self.transcript.final_model).observe(now - previous)
        return text

    def complete(self) -> None:
        t = self.transcript
        ended = time.perf_counter()
        usage = t.usage()
        self._end()
        self._measure(200, ended)
        self.runtime.limiter.charge(self.key_id, usage.prompt_tokens + usage.completion_tokens)
        self.bus.emitter.emit(
            RequestCompleted(
                request_id=t.request_id,
                manifest_version=t.manifest_version,
                model_id=t.final_model,
                prompt_tokens=usage.prompt_tokens,
                completion_tokens=usage.completion_tokens,
                latency_ms=(ended - t.started) * 1000.0,
                ttft_ms=(t.first_token_at - t.started) * 1000.0 if t.first_token_at is not None else None,
                finish_reason=t.finish_reason(),
                key_id=self.key_id,
            )
        )

    def fail(self, error: ApiError) -> None:
        if self.ended:
            return
        t = self.transcript
        self._end(error)
        self._measure(error.status, time.perf_counter())
        self.bus.emitter.emit(
            RequestFailed(
                request_id=t.request_id,
                manifest_version=t.manifest_version,
                code=error.code or "error",
                message=error.message,
                status=error.status,
                model_id=t.final_model,
                key_id=self.key_id,
            )
        )

    def abandon(self) -> None:
        """The client has gone: record it, and have the worker stop generating (if it still is)."""
        if self.ended:
            return
        self.fail(ApiError(CLIENT_GONE, "the client closed the connection", code="client_disconnected"))
        cancel = Cancel(request_id=self.transcript.request_id, reason="client_disconnected")
        task = asyncio.get_running_loop().create_task(self.bus.nc.publish(subjects.CANCEL, rpc.encode(cancel)))
        _cancels.add(task)
        task.add_done_callback(_cancels.discard)

    def _measure(self, status: int, ended: float) -> None:
        """The request's figures: its outcome and status; for an answer, its latencies and tokens."""
        t, m = self.transcript, self.runtime.metrics
        model = t.final_model
        if t.dispatch is not None:
            outcome = route_outcome(t.dispatch.intent, t.dispatch.target, t.dispatch.entry_model)
        else:
            outcome = UNROUTED if t.routed else DIRECT
        m.requests.labels(model, outcome, str(status)).inc()
        if status != 200:
            return
        m.duration.labels(model).observe(ended - t.started)
        if t.first_token_at is not None:
            m.ttft.labels(model).observe(t.first_token_at - t.started)
        usage = t.usage()
        m.tokens.labels(model, "in").inc(usage.prompt_tokens)
        m.tokens.labels(model, "out").inc(usage.completion_tokens)

    def _end(self, error: ApiError | None = None) -> None:
        self.ended = True
        if error is not None:
            self.span.set_status(Status(StatusCode.ERROR, error.message))
            self.span.set_attribute("http.response.status_code", error.status)
        self.span.end()
        self.exchange.close()


@post(
    "/v1/chat/completions",
    guards=[infer_key],
    summary="Create a chat completion (routed through the entry model, or direct to a model id)",
    description=(
        "OpenAI-compatible. `model` is the manifest's entry model (the request is classified and "
        "dispatched; the hop appears as a `dispatch_to_specialist` tool call) or any model id (direct). "
        "A conversation id in the `X-NRT-Session` header (else the `user` field) keeps the model's KV "
        "cache between turns. `stream: true` answers with server-sent events ending in `data: [DONE]`."
    ),
    status_code=200,
    responses={
        200: ResponseSpec(
            ChatCompletion,
            description="The completion, as JSON; with `stream: true`, as server-sent events (`text/event-stream`).",
            generate_examples=False,
        ),
        **errors(400, 404, 413, 500, 502, 503, 504, *KEYED),
    },
    operation_class=ChatOperation,
)
async def chat_completions(
    data: JSONBody[ChatCompletionRequest], request: Request[Any, Any, Any], runtime: NamedDependency[Runtime]
) -> Response[ChatCompletion] | Response[ErrorResponse] | Stream:
    started, started_wall = time.perf_counter(), time.time()
    created = int(started_wall)
    span = tracer.start_span(
        "POST /v1/chat/completions", context=tracing.extract(dict(request.headers)), kind=SpanKind.SERVER
    )
    with trace.use_span(span, end_on_exit=False):
        try:
            bus = runtime.require()
            settings = runtime.settings
            call = validate_chat(
                data, request.headers.get(SESSION_HEADER), settings.max_tokens_limit, settings.max_messages
            )
            admission = await bus.gate.admit()
            routed = check_model(admission.manifest, admission.version, call.model) == "routed"
        except ApiError as error:
            span.set_status(Status(StatusCode.ERROR, error.message))
            span.end()
            raise
        request_id = uuid.uuid4().hex
        span.set_attribute("nrt.request_id", request_id)
        span.set_attribute("nrt.model", call.model)
        transcript = Transcript(
            request_id=request_id,
            model=call.model,
            routed=routed,
            manifest_version=admission.version,
            session_id=call.session_id,
            started=started,
            created=created,
            started_wall=started_wall,
        )
        flight = Flight(runtime, bus, call, transcript, span, caller_key_id(request.headers))
        headers = {"X-NRT-Request-Id": request_id}
        try:
            await flight.start()
            first = await flight.next_text()  # the HTTP answer starts with the first token
        except RemoteError as exc:
            failure = ApiError.from_remote(exc)
            flight.fail(failure)
            failure.headers.update(headers)
            return failure.response()
        except BaseException:
            flight.fail(ApiError(500, "the request was interrupted", code="internal_error"))
            raise
    if call.stream:
        return Stream(_events(flight, first), media_type="text/event-stream", headers={**SSE_HEADERS, **headers})
    return await _collect(flight, first, headers)


async def _collect(
    flight: Flight, first: str | None, headers: dict[str, str]
) -> Response[ChatCompletion] | Response[ErrorResponse]:
    try:
        text = first
        while text is not None:
            text = await flight.next_text()
    except RemoteError as exc:
        error = ApiError.from_remote(exc)
        flight.fail(error)
        error.headers.update(headers)
        return error.response()
    except asyncio.CancelledError:
        flight.abandon()
        raise
    except BaseException:
        flight.fail(ApiError(500, "the request was interrupted", code="internal_error"))
        raise
    flight.complete()
    return Response(flight.transcript.completion(time.perf_counter()), headers=headers)


async def _events(flight: Flight, first: str | None) -> AsyncIterator[bytes]:
    t = flight.transcript
    try:
        # the role, the router hop and the first token in one write: the client has them at once
        opening = sse(t.opening_chunk())
        yield opening + sse(t.content_chunk(first)) if first else opening
        text = await flight.next_text() if first is not None else None
        while text is not None:
            if text:
                yield sse(t.content_chunk(text))
            text = await flight.next_text()
        for chunk in t.closing_chunks(time.perf_counter(), flight.call.include_usage):
            yield sse(chunk)
        flight.complete()
        yield SSE_DONE
    except RemoteError as exc:
        error = ApiError.from_remote(exc)
        flight.fail(error)
        yield sse_error(error)
        yield SSE_DONE
    finally:  # the client went away (cancelled) or the stream was closed early
        flight.abandon()
