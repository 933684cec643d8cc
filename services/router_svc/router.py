"""Route one request: classify with the entry model in this process, apply the dispatch rule, forward.

router_svc hosts the entry model (it is that model's worker, see ``router_svc.app``), so a
routed request crosses three transits: gateway -> router_svc -> the target's worker -> gateway.
The reply inbox is the gateway's: the ``GenerateRequest`` forwarded to the target carries the
router's ``Dispatch`` and has the gateway's inbox as reply subject, so the answering worker
streams its chunks straight back, the first one carrying the ``Dispatch``. When the target is
the entry model itself (no confident intent and no fallback), this process answers, streaming
to the same inbox. One ``RequestRouted`` event records the decision and the dispatch.

A request with a session id stays with its conversation (``nrt.core.routing.affinity``): on the
specialist that answered its last turn unless the new decision clears ``routing.sticky_margin``,
and on the worker holding its KV (``nrt.infer.<target>.<worker>``) while that worker lives; the
model's queue group takes it otherwise. Both come from this instance's fold of the event stream.

When this instance does not hold the manifest's entry model (still loading it, or holding
another manifest's router), it asks the entry model's subject instead, as before: slower, but
the request is served.
"""

from __future__ import annotations

import asyncio
import time

from nats.aio.client import Client
from opentelemetry import trace
from opentelemetry.trace import SpanKind

from nrt.adapters.bus import rpc, subjects
from nrt.adapters.bus.emitter import EventEmitter
from nrt.adapters.bus.errors import BadRequest, DeadlineExceeded, RemoteError, model_unavailable
from nrt.adapters.bus.rpc import StreamInbox
from nrt.adapters.metrics import RouterMetrics
from nrt.core.events import RequestRouted
from nrt.core.manifest import Manifest
from nrt.core.protocol import ClassifyReply, ClassifyRequest, Dispatch, GenerateRequest, RouteRequest
from nrt.core.routing import (
    Decision,
    choose_route,
    choose_worker,
    classify_request,
    previous_specialist,
    resolve_model,
    restrict,
    routing_text,
    serving_workers,
    stay_on_specialist,
)
from nrt.hosting.serving import CANNOT_GENERATE
from nrt.hosting.worker import Worker, stream_answer
from router_svc.manifests import ManifestHistory
from router_svc.settings import RouterSettings

tracer = trace.get_tracer("router_svc")

PLACEMENT_SETTLE_S = 5.0  # a router host that has joined this long ago without a placement will not get one soon


class Router:
    def __init__(
        self,
        nc: Client,
        manifests: ManifestHistory,
        emitter: EventEmitter,
        host: Worker,
        settings: RouterSettings,
        metrics: RouterMetrics | None = None,
    ) -> None:
        self.nc, self.manifests, self.emitter, self.settings = nc, manifests, emitter, settings
        self.metrics = metrics if metrics is not None else RouterMetrics()
        self.host = host  # this instance as the entry model's worker

    async def handle(self, request: RouteRequest, inbox: StreamInbox, received_at: float) -> None:
        started = time.perf_counter()
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
            await self._forward(request, request.model, inbox, None)
            return
        asked = time.perf_counter()
        decision, reply = await self._classify(manifest, request)
        previous = previous_specialist(self.manifests.follower.state, manifest, request.session_id)
        decision = stay_on_specialist(manifest, decision, previous)
        classify_ms = (time.perf_counter() - asked) * 1e3
        span.set_attribute("nrt.intent", decision.intent or "")
        span.set_attribute("nrt.target", decision.target)
        self.metrics.decided(decision.intent, decision.target, decision.entry, decision.confidence)
        route = Dispatch(
            request_id=request.request_id,
            entry_model=decision.entry,
            intent=decision.intent,
            target=decision.target,
            scores=decision.scores,
            router_ms=(time.perf_counter() - started) * 1e3,  # router_svc's own time, classification included
            rule=decision.rule,
            confidence=decision.confidence,
            router_worker_id=reply.worker_id,
            router_compute_ms=reply.latency_ms,
            received_at=received_at,
            sent_at=time.time(),
        )
        routed = RequestRouted(
            request_id=request.request_id,
            manifest_version=request.manifest_version,
            model_id=decision.entry,
            worker_id=reply.worker_id,
            intent=decision.intent,
            scores=decision.scores,
            confidence=decision.confidence,
            threshold=decision.threshold,
            target=decision.target,
            rule=decision.rule,
            latency_ms=classify_ms,
            attempt=request.attempt,
        )
        if decision.target == decision.entry and self._holds(manifest, decision.entry):
            self.emitter.emit(routed)
            await self._answer(request, route, inbox, received_at)
            return
        await self._forward(request, decision.target, inbox, route)
        self.emitter.emit(routed)  # after the forward: the request does not wait for it

    def _holds(self, manifest: Manifest, model_id: str) -> bool:
        """This instance hosts ``model_id`` from the source ``manifest`` names (not another version's)."""
        hosted = self.host.host.hosted.get(model_id)
        return hosted is not None and hosted.source == manifest.model(model_id).source

    async def _classify(self, manifest: Manifest, request: RouteRequest) -> tuple[Decision, ClassifyReply]:
        try:
            text = routing_text(request.messages)
        except ValueError as exc:
            raise BadRequest(str(exc), code="no_user_message") from None
        ask = classify_request(manifest, request.request_id, text)
        if await self._entry_here(manifest, ask.model_id):
            reply = await self._classify_here(ask)
        else:
            reply = await rpc.request(
                self.nc, subjects.infer(ask.model_id), ask, ClassifyReply, timeout=self.settings.classify_timeout
            )
        return choose_route(manifest, restrict(reply, manifest.intent_labels), reply.calibration), reply

    async def _entry_here(self, manifest: Manifest, model_id: str) -> bool:
        """Whether to classify in this process: this instance holds ``manifest``'s entry model, or is
        about to (a fresh instance, placed here or not placed yet: it waits for its own load, as a
        request waits out a cold start, up to ``classify_timeout``); else another router host's
        copy answers on the entry model's subject."""
        loop = asyncio.get_running_loop()
        deadline = loop.time() + self.settings.classify_timeout
        while True:
            hosted = self.host.host.hosted.get(model_id)
            if hosted is not None:
                return hosted.source == manifest.model(model_id).source
            model = self.manifests.follower.state.models.get(model_id)
            placed_here = model is not None and self.host.worker_id in model.placements
            settled = time.monotonic() - self.host.started_at > PLACEMENT_SETTLE_S
            if (settled and not placed_here) or loop.time() > deadline:
                return False
            await asyncio.sleep(0.02)

    async def _classify_here(self, ask: ClassifyRequest) -> ClassifyReply:
        """The entry model's scores, computed in this process (no NATS hop)."""
        serving = self.host.serving
        with tracer.start_as_current_span(f"router_svc classify {ask.model_id}", kind=SpanKind.INTERNAL):
            try:
                async with asyncio.timeout(self.settings.classify_timeout):
                    with serving.active(ask.model_id):
                        return await serving.classify(ask)
            except TimeoutError:
                raise DeadlineExceeded(
                    f"the entry model '{ask.model_id}' did not classify within {self.settings.classify_timeout:g}s"
                ) from None

    async def _answer(self, request: RouteRequest, route: Dispatch, inbox: StreamInbox, received_at: float) -> None:
        """The entry model answers the request itself (no confident intent and no fallback), from here."""
        generate = self._generate_request(request, route.target, route)
        with tracer.start_as_current_span(f"router_svc answer {route.target}", kind=SpanKind.INTERNAL):
            try:
                with self.host.serving.active(route.target):
                    await stream_answer(self.host.serving, generate, inbox, received_at)
            except RemoteError as exc:
                if exc.code != CANNOT_GENERATE:
                    raise
                raise BadRequest(
                    f"no intent was confident enough for this request ({route.rule}), and the entry model "
                    f"'{route.target}' cannot answer it itself: {exc.message}. Declare a fallback model in the "
                    "manifest to answer such requests",
                    code=CANNOT_GENERATE,
                ) from None

    async def _forward(self, request: RouteRequest, target: str, inbox: StreamInbox, route: Dispatch | None) -> None:
        # A forwarded request has someone else's reply subject, so NATS cannot tell the gateway
        # that nobody subscribes: check the folded placements instead of letting it time out.
        if not serving_workers(self.manifests.follower.state, target):
            raise model_unavailable(target)
        generate = self._generate_request(request, target, route)
        where = choose_worker(self.manifests.follower.state, target, request.session_id, request.avoid_workers)
        subject = subjects.infer(target) if where.worker_id is None else subjects.infer_at(target, where.worker_id)
        with tracer.start_as_current_span(f"router_svc dispatch {target}", kind=SpanKind.PRODUCER) as span:
            span.set_attribute("messaging.destination.name", subject)
            span.set_attribute("nrt.worker_choice", where.why)
            await rpc.forward(self.nc, subject, generate, reply_to=inbox.inbox)

    @staticmethod
    def _generate_request(request: RouteRequest, target: str, route: Dispatch | None) -> GenerateRequest:
        return GenerateRequest(
            request_id=request.request_id,
            model_id=target,
            manifest_version=request.manifest_version,
            messages=request.messages,
            prompt=request.prompt,
            params=request.params,
            session_id=request.session_id,
            stream=request.stream,
            route=route,
            deadline=request.deadline,
        )
