"""One admitted chat request on its way through the cluster, whatever HTTP API it came in by.

``take_off``: shape checks (400) -> admission (waits out a manifest swap, else 503) -> model
check against the admitted manifest (404) -> ``RequestAdmitted`` -> the RouteRequest to
router_svc -> the first frame back on the request's inbox. The HTTP answer starts only when
the first token (or an error) arrives, so an error the worker reports before answering, such
as a prompt beyond the context window, is a proper 4xx even for a streaming request; after
that, the endpoint shows errors in its stream. Every admitted request ends with exactly one
``RequestCompleted`` or ``RequestFailed``, under the manifest version it was admitted with,
charged to the caller's key. A request whose worker is lost before any of its answer came is
sent once more (to a live worker, or answered 503 at once); a client that goes away, or a
request ended because the gateway's NATS connection dropped, has its generation cancelled on
the worker (``nrt.requests.cancel``, sent once the connection is back).

The endpoints (``completions`` for OpenAI, ``messages`` for Anthropic) only shape: they read
the texts from a Flight and the rest from its ``Transcript``.
"""

from __future__ import annotations

import asyncio
import time
import uuid
from collections.abc import AsyncIterator, Callable
from typing import Any

from litestar import Request
from opentelemetry import trace
from opentelemetry.trace import Span, SpanKind, Status, StatusCode

from api_gateway.auth import caller
from api_gateway.errors import ApiError
from api_gateway.exchange import BUS_LOST, WORKER_LOST, RouteExchange, require_serving
from api_gateway.runtime import Bus, Runtime
from api_gateway.shaping import Transcript
from api_gateway.validate import ChatCall, check_model
from nrt.adapters.bus import rpc, subjects, tracing
from nrt.adapters.bus.errors import RemoteError
from nrt.adapters.metrics import DIRECT, UNROUTED, route_outcome
from nrt.core.events import RequestAdmitted, RequestCompleted, RequestFailed
from nrt.core.manifest import Manifest
from nrt.core.protocol import Cancel, InboxFrame, RouteRequest
from nrt.core.routing import routing_text

tracer = trace.get_tracer("api_gateway")

REQUEST_ID_HEADER = "X-NRT-Request-Id"
CLIENT_GONE = 499
CLIENT_DISCONNECTED = "client_disconnected"
# the failures that leave a worker generating an answer nobody will read: it gets a cancel
WORKER_STILL_GENERATING = frozenset({CLIENT_DISCONNECTED, BUS_LOST})
RETRIES = 1  # times a request whose worker was lost before answering is sent again
_cancels: set[asyncio.Task[None]] = set()  # cancels on their way to the workers


class Flight:
    """One admitted request: its transcript, its exchange, and the one event that ends it."""

    def __init__(
        self,
        runtime: Runtime,
        bus: Bus,
        call: ChatCall,
        transcript: Transcript,
        span: Span,
        key_id: str | None,
        prompt: str | None = None,
    ) -> None:
        self.runtime, self.bus, self.call, self.transcript, self.span = runtime, bus, call, transcript, span
        self.key_id = key_id  # the API key the usage is recorded for (None: no key, with authentication off)
        self.prompt = prompt  # the routing text, recorded with RequestAdmitted (audit.record_prompts)
        self.exchange = RouteExchange(bus.nc, bus.inboxes, runtime.settings)
        self.ended = False
        self.route: RouteRequest | None = None
        self.retries = RETRIES

    @property
    def headers(self) -> dict[str, str]:
        """The headers of every answer to this request, errors included."""
        return {REQUEST_ID_HEADER: self.transcript.request_id}

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
                prompt=self.prompt,
                gateway_id=self.runtime.gateway_id,
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

    async def rest(self, first: str | None) -> AsyncIterator[str]:
        """The answer's texts after ``first`` (the non-empty ones), to its end.

        A bus error ends the flight (``RequestFailed``) and is raised as its ApiError."""
        try:
            text = await self.next_text() if first is not None else None
            while text is not None:
                if text:
                    yield text
                text = await self.next_text()
        except RemoteError as exc:
            error = ApiError.from_remote(exc)
            error.headers.update(self.headers)
            self.fail(error)
            raise error from exc

    async def land(self, first: str | None) -> None:
        """Receive the whole answer (into the transcript) and complete; raises the ApiError that ended it."""
        try:
            async for _ in self.rest(first):
                pass
        except asyncio.CancelledError:
            self.abandon()
            raise
        except ApiError:
            raise
        except BaseException:
            self.fail(ApiError(500, "the request was interrupted", code="internal_error"))
            raise
        self.complete()

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
        if error.code in WORKER_STILL_GENERATING:
            self._cancel(error.code)

    def abandon(self) -> None:
        """The client has gone: record it, and have the worker stop generating (if it still is)."""
        self.fail(ApiError(CLIENT_GONE, "the client closed the connection", code=CLIENT_DISCONNECTED))

    def _cancel(self, reason: str) -> None:
        """Tell the workers to stop generating this request (nats-py holds it while reconnecting)."""
        cancel = Cancel(request_id=self.transcript.request_id, reason=reason)
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


def recorded_prompt(manifest: Manifest, call: ChatCall, routed: bool) -> str | None:
    """The text the router classifies, for a routed request while the manifest in force records
    prompts (else None: a direct call's text is never kept, the what-if replays routed requests)."""
    if not routed or not manifest.audit.record_prompts:
        return None
    try:
        return routing_text(call.messages)
    except ValueError:  # no user message: nothing a router could classify
        return None


async def take_off(
    name: str, request: Request[Any, Any, Any], runtime: Runtime, validate: Callable[[], ChatCall]
) -> tuple[Flight, str | None]:
    """Admit the request ``validate`` makes of the body and send it; the flight and its first text
    (None: the answer ended without one). Raises ApiError when it cannot start or fails before
    its first token (the flight then recorded it). ``name``: the span's, e.g. ``POST /v1/messages``."""
    started, started_wall = time.perf_counter(), time.time()
    span = tracer.start_span(name, context=tracing.extract(dict(request.headers)), kind=SpanKind.SERVER)
    with trace.use_span(span, end_on_exit=False):
        try:
            bus = runtime.require()
            call = validate()
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
            created=int(started_wall),
            started_wall=started_wall,
        )
        prompt = recorded_prompt(admission.manifest, call, routed)
        flight = Flight(runtime, bus, call, transcript, span, caller(request).key_id, prompt)
        try:
            await flight.start()
            return flight, await flight.next_text()  # the HTTP answer starts with the first token
        except RemoteError as exc:  # the worker's error, or nothing serves the model (require_serving)
            failure = ApiError.from_remote(exc)
            failure.headers.update(flight.headers)
            flight.fail(failure)
            raise failure from exc
        except BaseException:
            flight.fail(ApiError(500, "the request was interrupted", code="internal_error"))
            raise
