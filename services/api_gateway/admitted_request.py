"""One admitted chat request on its way through the cluster, whatever HTTP API it came in by.

``start_request``: shape checks (400) -> admission (waits out a manifest swap, else 503) -> model
check against the admitted manifest (404) -> ``RequestAdmitted`` -> the RouteRequest to
router_svc -> the first frame back on the request's inbox. The HTTP answer starts only when
the first token (or an error) arrives, so an error the worker reports before answering, such
as a prompt beyond the context window, is a proper 4xx even for a streaming request; after
that, the endpoint shows errors in its stream. Every admitted request ends with exactly one
``RequestCompleted`` or ``RequestFailed``, under the manifest version it was admitted with,
charged to the caller's key. A request whose worker is lost before any of its answer came is
sent once more (to a live worker, never the lost one, or answered 503 at once); a client that goes away, or a
request ended because the gateway's NATS connection dropped, has its generation cancelled on
the worker (``nrt.requests.cancel``, sent once the connection is back).

The endpoints (``completions`` for OpenAI, ``messages`` for Anthropic) only shape: they read
the texts from an AdmittedRequest and the rest from its ``Transcript``.
"""

from __future__ import annotations

import asyncio
import time
import uuid
from collections.abc import AsyncIterator, Callable
from typing import Any

import msgspec
from litestar import Request
from opentelemetry import trace
from opentelemetry.trace import Span, SpanKind, Status, StatusCode

from api_gateway.auth import caller
from api_gateway.cluster_link import Bus, ClusterLink
from api_gateway.errors import ApiError
from api_gateway.reply_stream import WORKER_LOST, ReplyStream, WorkerLost, require_serving
from api_gateway.request_ended import (
    CLIENT_DISCONNECTED,
    CLIENT_GONE,
    RequestEnded,
    RequestEndedHandler,
    cancel_generation,
    charge,
    emit,
    measure,
)
from api_gateway.shaping import Transcript
from api_gateway.validate import ChatCall, check_model
from nrt.adapters.bus import tracing
from nrt.adapters.bus.errors import RemoteError
from nrt.core.events import RequestAdmitted
from nrt.core.manifest import Manifest
from nrt.core.protocol import InboxFrame, RouteRequest, constrained_by, constraint_text
from nrt.core.routing import routing_text

tracer = trace.get_tracer("api_gateway")

REQUEST_ID_HEADER = "X-NRT-Request-Id"
RETRIES = 1  # times a request whose worker was lost before answering is sent again


class AdmittedRequest:
    """One admitted request: its transcript, its reply stream, and the one ``RequestEnded`` that ends it."""

    def __init__(
        self,
        cluster_link: ClusterLink,
        bus: Bus,
        call: ChatCall,
        transcript: Transcript,
        span: Span,
        key_id: str | None,
        prompt: str | None = None,
        record_prompts: bool = False,
    ) -> None:
        self.cluster_link, self.bus, self.call, self.transcript, self.span = cluster_link, bus, call, transcript, span
        self.key_id = key_id  # the API key the usage is recorded for (None: no key, with authentication off)
        self.prompt = prompt  # the routing text, recorded with RequestAdmitted (audit.record_prompts)
        self.record_prompts = record_prompts  # the manifest in force records prompts (and constraints' text)
        self.replies = ReplyStream(bus.nc, bus.inboxes, cluster_link.settings)
        self.ended = False
        self.route: RouteRequest | None = None
        self.retries = RETRIES
        # what follows the request's end, in this order: its figures, its key's tokens, its event, a cancel
        self.on_ended: tuple[RequestEndedHandler, ...] = (
            measure(cluster_link.metrics),
            charge(bus.limiter),
            emit(bus.emitter),
            cancel_generation(bus.nc),
        )

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
                gateway_id=self.cluster_link.gateway_id,
                constrained=constrained_by(self.call.params),
                constraint=constraint_text(self.call.params) if self.record_prompts else None,
            )
        )
        route = RouteRequest(
            request_id=t.request_id,
            manifest_version=t.manifest_version,
            model=self.call.model,
            messages=self.call.messages,
            prompt=self.call.prompt,
            params=self.call.params,
            session_id=self.call.session_id,
            stream=self.call.stream,
            deadline=self.replies.deadline,
        )
        if not t.routed:  # no live worker serves it: 503 at once, not after a timeout
            require_serving(self.bus.follower.state, self.call.model)
        t.sent_at, t.sent_wall = time.perf_counter(), time.time()
        await self._send(route)

    async def _send(self, route: RouteRequest) -> None:
        self.route = route
        await self.replies.open(route)
        if not self.transcript.routed:
            self.replies.expect(self.call.model)

    async def _next_chunk(self) -> InboxFrame | None:
        """The reply stream's next chunk; sent again once when its worker was lost before answering."""
        while True:
            try:
                return await self.replies.next()
            except RemoteError as exc:
                if exc.code != WORKER_LOST or self.replies.frames > 0 or self.retries <= 0 or self.route is None:
                    raise
                lost = (exc.worker_id,) if isinstance(exc, WorkerLost) else ()
            self.retries -= 1
            self.span.add_event("retry", {"reason": WORKER_LOST, "lost_worker": ",".join(lost)})
            self.replies.close()  # frames still coming for the first attempt are dropped
            self.replies = ReplyStream(self.bus.nc, self.bus.inboxes, self.cluster_link.settings)
            avoid = (*self.route.avoid_workers, *lost)
            await self._send(msgspec.structs.replace(self.route, avoid_workers=avoid, attempt=self.route.attempt + 1))

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
            self.cluster_link.metrics.inter_token.labels(self.transcript.final_model).observe(now - previous)
        return text

    async def remaining_texts(self, first: str | None) -> AsyncIterator[str]:
        """The answer's texts after ``first`` (the non-empty ones), to its end.

        A bus error ends the admitted (``RequestFailed``) and is raised as its ApiError."""
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

    async def receive_answer(self, first: str | None) -> None:
        """Receive the whole answer (into the transcript) and complete; raises the ApiError that ended it."""
        try:
            async for _ in self.remaining_texts(first):
                pass
        except asyncio.CancelledError:
            self.client_gone()
            raise
        except ApiError:
            raise
        except BaseException:
            self.fail(ApiError(500, "the request was interrupted", code="internal_error"))
            raise
        self.complete()

    def complete(self) -> None:
        """The whole answer has been received: end the request as answered."""
        self._ended(None)

    def fail(self, error: ApiError) -> None:
        """End the request with ``error`` (nothing happens when it has already ended)."""
        self._ended(error)

    def client_gone(self) -> None:
        """The client has gone: record it, and have the worker stop generating (if it still is)."""
        self.fail(ApiError(CLIENT_GONE, "the client closed the connection", code=CLIENT_DISCONNECTED))

    def _ended(self, error: ApiError | None) -> None:
        if self.ended:
            return
        self.ended = True
        fact = RequestEnded(transcript=self.transcript, key_id=self.key_id, ended=time.perf_counter(), error=error)
        if error is not None:
            self.span.set_status(Status(StatusCode.ERROR, error.message))
            self.span.set_attribute("http.response.status_code", error.status)
        self.span.end()
        self.replies.close()
        for handle in self.on_ended:
            handle(fact)


def recorded_prompt(manifest: Manifest, call: ChatCall, routed: bool) -> str | None:
    """The text the router classifies, for a routed request while the manifest in force records
    prompts (else None: a direct call's text is never kept, the what-if replays routed requests)."""
    if not routed or not manifest.audit.record_prompts:
        return None
    try:
        return routing_text(call.messages)
    except ValueError:  # no user message: nothing a router could classify
        return None


async def start_request(
    name: str, request: Request[Any, Any, Any], cluster_link: ClusterLink, validate: Callable[[], ChatCall]
) -> tuple[AdmittedRequest, str | None]:
    """Admit the request ``validate`` makes of the body and send it; the admitted and its first text
    (None: the answer ended without one). Raises ApiError when it cannot start or fails before
    its first token (the admitted then recorded it). ``name``: the span's, e.g. ``POST /v1/messages``."""
    started, started_wall = time.perf_counter(), time.time()
    span = tracer.start_span(name, context=tracing.extract(dict(request.headers)), kind=SpanKind.SERVER)
    with trace.use_span(span, end_on_exit=False):
        try:
            bus = cluster_link.require()
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
            tools=call.params.tools,
        )
        prompt = recorded_prompt(admission.manifest, call, routed)
        record = admission.manifest.audit.record_prompts
        admitted = AdmittedRequest(cluster_link, bus, call, transcript, span, caller(request).key_id, prompt, record)
        try:
            await admitted.start()
            return admitted, await admitted.next_text()  # the HTTP answer starts with the first token
        except RemoteError as exc:  # the worker's error, or nothing serves the model (require_serving)
            failure = ApiError.from_remote(exc)
            failure.headers.update(admitted.headers)
            admitted.fail(failure)
            raise failure from exc
        except BaseException:
            admitted.fail(ApiError(500, "the request was interrupted", code="internal_error"))
            raise
