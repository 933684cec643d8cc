"""Route one request: classify with the entry model, apply the dispatch rule, forward.

The reply inbox is the gateway's: router_svc sends its ``Dispatch`` frame there, then
forwards a ``GenerateRequest`` with the same inbox as reply subject, so the answering
worker streams its chunks straight to the gateway.
"""

from __future__ import annotations

import time

from nats.aio.client import Client
from opentelemetry import trace
from opentelemetry.trace import SpanKind

from nrt.bus import rpc, subjects
from nrt.bus.emitter import EventEmitter
from nrt.bus.errors import BadRequest, RemoteError, Unavailable
from nrt.bus.rpc import StreamInbox
from nrt.events import RequestDispatched, RouterFired
from nrt.manifest import Manifest
from nrt.protocol import ClassifyReply, Dispatch, GenerateRequest, RouteRequest
from nrt.routing import Decision, classify_request, decide, resolve_model, restrict, routing_text, serving_workers
from router_svc.manifests import ManifestHistory
from router_svc.settings import RouterSettings

tracer = trace.get_tracer("router_svc")

DIRECT_RULE = "direct"


class Router:
    def __init__(self, nc: Client, manifests: ManifestHistory, emitter: EventEmitter, settings: RouterSettings) -> None:
        self.nc, self.manifests, self.emitter, self.settings = nc, manifests, emitter, settings

    async def handle(self, request: RouteRequest, inbox: StreamInbox) -> None:
        manifest = await self.manifests.at(request.manifest_version, within=self.settings.manifest_wait)
        call = resolve_model(manifest, request.model)
        if call is None:
            valid = ", ".join(manifest.model_ids)
            raise RemoteError(
                "model_not_found",
                f"model '{request.model}' is not in manifest v{request.manifest_version}; valid: {valid}",
                404,
            )
        span = trace.get_current_span()
        if call == "direct":
            span.set_attribute("nrt.target", request.model)
            await self._forward(request, request.model, inbox)
            self._emit_dispatched(request, request.model, request.model, None, DIRECT_RULE)
            return
        decision, reply, elapsed_ms = await self._classify(manifest, request)
        span.set_attribute("nrt.intent", decision.intent or "")
        span.set_attribute("nrt.target", decision.target)
        await inbox.send(
            Dispatch(
                request_id=request.request_id,
                entry_model=decision.entry,
                intent=decision.intent,
                target=decision.target,
                scores=decision.scores,
                router_ms=elapsed_ms,
                rule=decision.rule,
                confidence=decision.confidence,
                router_worker_id=reply.worker_id,
                router_compute_ms=reply.latency_ms,
            )
        )
        await self._forward(request, decision.target, inbox)
        self.emitter.emit(
            RouterFired(
                request_id=request.request_id,
                model_id=decision.entry,
                intent=decision.intent,
                scores=decision.scores,
                latency_ms=elapsed_ms,
                manifest_version=request.manifest_version,
            )
        )
        self._emit_dispatched(request, decision.entry, decision.target, decision.intent, decision.rule)

    async def _classify(self, manifest: Manifest, request: RouteRequest) -> tuple[Decision, ClassifyReply, float]:
        try:
            text = routing_text(request.messages)
        except ValueError as exc:
            raise BadRequest(str(exc), code="no_user_message") from None
        ask = classify_request(manifest, request.request_id, text)
        started = time.perf_counter()
        reply = await rpc.request(
            self.nc, subjects.infer(ask.model_id), ask, ClassifyReply, timeout=self.settings.classify_timeout
        )
        elapsed_ms = (time.perf_counter() - started) * 1000.0
        return decide(manifest, restrict(reply, manifest.intent_labels), reply.calibration), reply, elapsed_ms

    async def _forward(self, request: RouteRequest, target: str, inbox: StreamInbox) -> None:
        # A forwarded request has someone else's reply subject, so NATS cannot tell the gateway
        # that nobody subscribes: check the folded placements instead of letting it time out.
        if not serving_workers(self.manifests.follower.state, target):
            raise Unavailable(
                f"model '{target}' is not loaded on any live worker (see GET /v1/models for placements)",
                code="model_unavailable",
            )
        generate = GenerateRequest(
            request_id=request.request_id,
            model_id=target,
            manifest_version=request.manifest_version,
            messages=request.messages,
            params=request.params,
            session_id=request.session_id,
            stream=request.stream,
        )
        with tracer.start_as_current_span(f"router_svc dispatch {target}", kind=SpanKind.PRODUCER) as span:
            span.set_attribute("messaging.destination.name", subjects.infer(target))
            await rpc.forward(self.nc, subjects.infer(target), generate, reply_to=inbox.inbox)

    def _emit_dispatched(self, request: RouteRequest, source: str, target: str, intent: str | None, rule: str) -> None:
        self.emitter.emit(
            RequestDispatched(
                request_id=request.request_id,
                from_model=source,
                to_model=target,
                intent=intent,
                rule=rule,
                manifest_version=request.manifest_version,
            )
        )
