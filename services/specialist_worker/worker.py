"""The specialist worker: hosts models, serves ``nrt.infer.<model_id>``, obeys control commands."""

from __future__ import annotations

import asyncio
import contextlib
import logging
import time
import uuid
from typing import Any, cast

import msgspec
from nats.aio.client import Client
from nats.aio.subscription import Subscription

from nrt.bus import rpc, subjects
from nrt.bus.errors import BadRequest, RemoteError
from nrt.bus.follow import EventFollower
from nrt.bus.jetstream import EventPublisher
from nrt.events import (
    Event,
    ManifestApplied,
    RouterCalibrated,
    SessionKvEvicted,
    SessionOpened,
    SessionTouched,
    TierChanged,
    WorkerJoined,
    WorkerLost,
)
from nrt.inference import (
    ArtifactRegistry,
    BatchingGenerator,
    ContextWindowError,
    Encoder,
    InferenceError,
    TemplateError,
)
from nrt.manifest import ModelSpec
from nrt.protocol import (
    Calibration,
    ClassifyReply,
    ClassifyRequest,
    ControlCommand,
    ControlReply,
    EmbedReply,
    EmbedRequest,
    GenerateChunk,
    GenerateRequest,
    HostedModel,
    InferRequest,
    PromoteModel,
    PromoteResult,
    WorkerHeartbeat,
)
from nrt.routing import Scored
from specialist_worker import classify, remote
from specialist_worker.hosting import ModelHost, Transition
from specialist_worker.prompts import generation_request
from specialist_worker.resources import HostResources
from specialist_worker.sources import RemoteEndpoint, resolve

log = logging.getLogger("nrt.worker")

# cluster_state's answers to an on-demand promotion that the request must get: no room in the
# budget. Any other failure to ask (no cluster_state, a placement it does not know yet) is
# not the request's fault: the worker promotes the model itself.
_BUDGET_REFUSALS = frozenset({"budget_exhausted"})


class Worker:
    def __init__(
        self,
        nc: Client,
        resources: HostResources,
        worker_id: str | None = None,
        max_batch_size: int = 16,
        heartbeat_s: float = 2.0,
        ort_spin: bool = False,
        promote_timeout: float = 60.0,
    ) -> None:
        self.nc = nc
        self.resources = resources
        self.worker_id = worker_id or f"{resources.host}-{uuid.uuid4().hex[:6]}"
        self.host = ModelHost(ArtifactRegistry(spin=ort_spin), max_batch_size=max_batch_size)
        self.heartbeat_s = heartbeat_s
        self.promote_timeout = promote_timeout  # how long a request waits for cluster_state to make room
        self.events = EventPublisher(nc)
        self.manifest = EventFollower(nc)
        self.routers = classify.RouterIndexes()
        self._subscriptions: dict[str, Subscription] = {}
        self._locks: dict[str, asyncio.Lock] = {}
        self._background: set[asyncio.Task[None]] = set()

    # -- life cycle ------------------------------------------------------------------------

    async def start(self) -> None:
        await self.manifest.start(types=(ManifestApplied,), latest_only=True)
        await rpc.serve(self.nc, subjects.control(self.worker_id), ControlCommand, self.control)
        await self.events.publish(WorkerJoined(worker_id=self.worker_id, **msgspec.structs.asdict(self.resources)))
        await self.heartbeat()
        log.info("worker %s ready (%s)", self.worker_id, ", ".join(self.resources.providers))

    async def run_heartbeats(self, stopping: asyncio.Event) -> None:
        while not stopping.is_set():
            await self.heartbeat()
            with contextlib.suppress(TimeoutError):
                await asyncio.wait_for(stopping.wait(), self.heartbeat_s)

    async def stop(self) -> None:
        for sub in self._subscriptions.values():
            await sub.unsubscribe()
        if self._background:
            await asyncio.gather(*self._background, return_exceptions=True)
        await self.events.publish(WorkerLost(worker_id=self.worker_id, reason="shutdown"))
        await asyncio.to_thread(self.host.close)

    async def heartbeat(self) -> None:
        beat = WorkerHeartbeat(
            worker_id=self.worker_id,
            **msgspec.structs.asdict(self.resources),
            models=tuple(
                HostedModel(
                    model_id=h.model_id,
                    tier=self.host.tier(h.model_id),
                    bytes_held=self.host.bytes_held(h.model_id),
                    active_requests=h.active_requests,
                    sessions=len(h.sessions),
                )
                for h in list(self.host.hosted.values())
            ),
            sent_at=time.time(),
        )
        await self.nc.publish(subjects.WORKER_HEARTBEAT, rpc.encode(beat))

    # -- events ------------------------------------------------------------------------------

    def emit(self, event: Event) -> None:
        """Publish in the background: a reply never waits for its events."""
        task = asyncio.create_task(self._publish(event))
        self._background.add(task)
        task.add_done_callback(self._background.discard)

    async def _publish(self, event: Event) -> None:
        try:
            await self.events.publish(event)
        except Exception:
            log.exception("could not publish %s", event.type)

    def _tier_event(self, t: Transition, reason: str, cold_start: bool = False) -> None:
        """Publish a measured tier change; no event for a step that changed nothing, except a
        failed load (unloaded -> unloaded), which withdraws the placement the log announced."""
        if t.changed or reason == "load_failed":
            self.emit(
                TierChanged(
                    model_id=t.model_id,
                    worker_id=self.worker_id,
                    from_tier=t.from_tier,
                    to_tier=t.to_tier,
                    reason=reason,
                    elapsed_ms=t.elapsed_ms,
                    bytes_held=t.bytes_held,
                    cold_start=cold_start,
                )
            )

    # -- tiers ---------------------------------------------------------------------------------

    def _lock(self, model_id: str) -> asyncio.Lock:
        return self._locks.setdefault(model_id, asyncio.Lock())

    def spec(self, model_id: str) -> ModelSpec | None:
        manifest = self.manifest.manifest
        if manifest is None:
            return None
        try:
            return manifest.model(model_id)
        except KeyError:
            return None

    async def load(self, model_id: str, source: str, tier: str, reason: str) -> list[Transition]:
        async with self._lock(model_id):
            spec = self.spec(model_id)
            started = time.perf_counter()
            try:
                target = resolve(source, spec.remote_model if spec else None, spec.api_key_env if spec else None)
                steps = [await asyncio.to_thread(self.host.load, model_id, source, target)]
            except Exception:
                if model_id not in self.host.hosted:  # the placement did not happen: say so in the log
                    elapsed_ms = (time.perf_counter() - started) * 1e3
                    self._tier_event(Transition(model_id, "unloaded", "unloaded", elapsed_ms, 0), "load_failed")
                raise
            # Subscribed before any tier is announced: once the log says a worker holds the
            # model, a request for it reaches one (it waits on this lock while we promote).
            await self._subscribe(model_id)
            if tier == "resident":
                steps.append(await asyncio.to_thread(self.host.promote, model_id))
            for step in steps:
                self._tier_event(step, reason)
            await self._calibrate_router(model_id)
        return steps

    async def _calibrate_router(self, model_id: str) -> None:
        """The manifest's entry model sets its own floor as it loads, not at its first request."""
        if self.host.tier(model_id) != "resident":
            return
        runtime, manifest = self.host.runtime(model_id), self.manifest.manifest
        try:
            calibration = await asyncio.to_thread(
                classify.calibration_at_load, self.routers, manifest, model_id, runtime
            )
        except Exception:  # the first request calibrates again, and says what is wrong
            log.exception("router %s could not calibrate from its examples", model_id)
            return
        self._announce(model_id, calibration)

    def _announce(self, model_id: str, calibration: Calibration | None) -> None:
        """Record a router model's own floor, once per model and set of labels and examples."""
        if calibration is not None and self.routers.first_time(model_id, calibration):
            fields = msgspec.structs.asdict(calibration)
            self.emit(RouterCalibrated(model_id=model_id, worker_id=self.worker_id, **fields))

    async def _subscribe(self, model_id: str) -> None:
        if model_id not in self._subscriptions:
            self._subscriptions[model_id] = await rpc.serve_stream(
                self.nc,
                subjects.infer(model_id),
                cast(type[GenerateRequest], InferRequest),
                self.infer,
                queue=subjects.INFER_QUEUE,
            )

    async def ensure_resident(
        self, model_id: str, reason: str, cold_start: bool, manifest_version: int = 0
    ) -> float | None:
        """Promote ``model_id`` if it is standby; the milliseconds it took, or None if it was ready.

        A request that finds its model standby (``cold_start``) asks cluster_state first
        (``nrt.models.promote``): it applies the budget, demoting the least recently used
        non-critical residents to make room, then sends this worker the promote command; when
        nothing can go, the request fails with that 503 and its reason. If cluster_state does
        not answer, the worker promotes the model itself (serving comes first) and the budget
        is enforced after the fact once cluster_state sees the change.
        """
        if self.host.tier(model_id) in ("resident", "remote"):
            return None
        started = time.perf_counter()
        if cold_start:
            await self._promote_within_budget(model_id, manifest_version)
            if self.host.tier(model_id) in ("resident", "remote"):
                return (time.perf_counter() - started) * 1e3
        return await self._promote_here(model_id, reason, cold_start)

    async def _promote_here(self, model_id: str, reason: str, cold_start: bool) -> float | None:
        """standby -> resident on this worker, measured and recorded; None if it was not standby."""
        async with self._lock(model_id):
            if self.host.tier(model_id) != "standby":
                return None
            step = await asyncio.to_thread(self.host.promote, model_id)
            self._tier_event(step, reason, cold_start=cold_start)
            return step.elapsed_ms

    async def _promote_within_budget(self, model_id: str, manifest_version: int) -> None:
        ask = PromoteModel(
            model_id=model_id, reason="on_demand", worker_id=self.worker_id, manifest_version=manifest_version
        )
        try:
            await rpc.request(self.nc, subjects.PROMOTE, ask, PromoteResult, timeout=self.promote_timeout)
        except RemoteError as exc:
            if exc.code in _BUDGET_REFUSALS:
                raise
            log.warning("cluster_state did not promote %s (%s); promoting it here", model_id, exc.message)

    async def control(self, command: ControlCommand) -> ControlReply:
        model_id, started = command.model_id, time.perf_counter()
        before = self.host.tier(model_id)
        if command.action == "load":
            if command.source is None or command.tier is None:
                raise BadRequest("load needs a source and a tier")
            await self.load(model_id, command.source, command.tier, command.reason)
        elif command.action == "promote":
            self.host.get(model_id)
            # a promotion that a waiting request asked for (on_demand) is that request's cold start
            await self._promote_here(model_id, command.reason, cold_start=command.reason == "on_demand")
        elif command.action in ("demote", "unload"):
            self.host.get(model_id)
            async with self._lock(model_id):
                change = self.host.demote if command.action == "demote" else self.host.unload
                self._tier_event(await asyncio.to_thread(change, model_id), command.reason)
            if command.action == "unload":
                self.routers.forget(model_id)
                sub = self._subscriptions.pop(model_id, None)
                if sub is not None:
                    await sub.unsubscribe()
        elif command.action == "evict_session":
            if command.session_id is None:
                raise BadRequest("evict_session needs a session_id")
            self.evict_session(model_id, command.session_id, command.reason)
        else:  # pragma: no cover - the type admits no other action
            raise BadRequest(f"unknown action {command.action!r}")
        after = self.host.tier(model_id)
        return ControlReply(
            worker_id=self.worker_id,
            model_id=model_id,
            tier=after,
            bytes_held=self.host.bytes_held(model_id),
            elapsed_ms=(time.perf_counter() - started) * 1e3,
            changed=after != before or command.action == "evict_session",
        )

    def evict_session(self, model_id: str, session_id: str, reason: str) -> int:
        hosted = self.host.get(model_id)
        freed = 0
        if self.host.tier(model_id) == "resident":
            runtime = self.host.runtime(model_id)
            if isinstance(runtime, BatchingGenerator):
                freed = runtime.evict_session(_session_key(model_id, session_id))
        hosted.sessions.discard(session_id)
        self.emit(
            SessionKvEvicted(
                session_id=session_id, model_id=model_id, worker_id=self.worker_id, bytes_freed=freed, reason=reason
            )
        )
        return freed

    # -- inference -----------------------------------------------------------------------------

    async def infer(self, request: Any, inbox: rpc.StreamInbox) -> None:
        hosted = self.host.get(request.model_id)
        hosted.active_requests += 1
        try:
            if isinstance(request, GenerateRequest):
                await self.generate(request, inbox)
            elif isinstance(request, ClassifyRequest):
                await inbox.send(await self.classify(request), last=True)
            elif isinstance(request, EmbedRequest):
                await inbox.send(await self.embed(request), last=True)
        finally:
            hosted.active_requests -= 1

    async def generate(self, request: GenerateRequest, inbox: rpc.StreamInbox) -> None:
        model_id = request.model_id
        hosted = self.host.get(model_id)
        if isinstance(hosted.target, RemoteEndpoint):
            await self._generate_remote(request, hosted.target, inbox)
            return
        cold_ms = await self.ensure_resident(model_id, "on_demand", True, request.manifest_version)
        runtime = self.host.runtime(model_id)
        if not isinstance(runtime, BatchingGenerator):
            raise BadRequest(f"model '{model_id}' is an encoder; it can embed or classify, not generate")
        session_key = _session_key(model_id, request.session_id) if request.session_id else None
        try:
            engine_request = generation_request(request, self.spec(model_id), session_key)
        except TemplateError as exc:
            raise BadRequest(str(exc), code="bad_template") from exc
        try:
            async for chunk in runtime.generate(engine_request):  # one chunk, the last, unless streaming
                if chunk.usage is not None and request.session_id:
                    self._session_touched(request.session_id, model_id, runtime, session_key, chunk.usage)
                await inbox.send(
                    GenerateChunk(
                        request_id=request.request_id,
                        model_id=model_id,
                        worker_id=self.worker_id,
                        text=chunk.text,
                        token_ids=chunk.token_ids,
                        finish_reason=chunk.finish_reason,
                        usage=chunk.usage,
                        timings=chunk.timings,
                        cold_start_ms=cold_ms,
                    ),
                    last=chunk.finish_reason is not None,
                )
                cold_ms = None  # on the first chunk only
        except ContextWindowError as exc:
            raise RemoteError("context_window_exceeded", str(exc), 400) from exc
        except InferenceError as exc:
            raise RemoteError("inference_failed", str(exc), 500) from exc

    def _session_touched(
        self, session_id: str, model_id: str, runtime: BatchingGenerator, key: str | None, usage: Any
    ) -> None:
        hosted = self.host.get(model_id)
        if session_id not in hosted.sessions:
            hosted.sessions.add(session_id)
            self.emit(SessionOpened(session_id=session_id, model_id=model_id, worker_id=self.worker_id))
        self.emit(
            SessionTouched(
                session_id=session_id,
                model_id=model_id,
                worker_id=self.worker_id,
                cached_tokens=usage.prompt_tokens + usage.completion_tokens,
                kv_bytes=runtime.session_bytes(key) if key else 0,
                reused_tokens=usage.cached_tokens,
            )
        )

    async def _generate_remote(
        self, request: GenerateRequest, endpoint: RemoteEndpoint, inbox: rpc.StreamInbox
    ) -> None:
        messages = request.messages or ()
        if request.prompt is not None:
            from nrt.protocol import ChatMessage

            messages = (ChatMessage("user", request.prompt),)
        async for text, finish in remote.stream_chat(endpoint, messages, request.params):
            await inbox.send(
                GenerateChunk(
                    request_id=request.request_id,
                    model_id=request.model_id,
                    worker_id=self.worker_id,
                    text=text,
                    finish_reason="length" if finish == "length" else ("stop" if finish else None),
                )
            )

    async def classify(self, request: ClassifyRequest) -> ClassifyReply:
        if not request.labels:
            raise BadRequest("classify needs at least one label")
        await self.ensure_resident(request.model_id, "on_demand", cold_start=True)
        runtime = self.host.runtime(request.model_id)
        started = time.perf_counter()
        calibration: Calibration | None
        if isinstance(runtime, Encoder):
            result, calibration = await asyncio.to_thread(self._classify_encoder, request, runtime)
        else:
            spec = self.spec(request.model_id)
            template = spec.template if spec is not None else None
            result = await asyncio.to_thread(
                classify.classify_causal, runtime.model, request.labels, request.text, template
            )
            calibration = classify.likelihood_floor(request)
        self._announce(request.model_id, calibration)
        assert result.best is not None  # there is at least one label
        return ClassifyReply(
            model_id=request.model_id,
            worker_id=self.worker_id,
            scores=result.scores,
            best=result.best,
            confidence=result.confidence,
            latency_ms=(time.perf_counter() - started) * 1e3,
            calibration=calibration,
        )

    def _classify_encoder(self, request: ClassifyRequest, encoder: Encoder) -> tuple[Scored, Calibration | None]:
        """Off the event loop, in one thread handoff: the router's index (built once) and the scores."""
        router = self.routers.get(request.model_id, encoder, request.labels, request.examples)
        return classify.classify_encoder(encoder, router, request.text), router.calibration

    async def embed(self, request: EmbedRequest) -> EmbedReply:
        await self.ensure_resident(request.model_id, "on_demand", cold_start=True)
        runtime = self.host.runtime(request.model_id)
        if not isinstance(runtime, Encoder):
            raise BadRequest(f"model '{request.model_id}' is not an encoder; it cannot embed")
        started = time.perf_counter()
        vectors = await asyncio.to_thread(runtime.embed, list(request.texts))
        return EmbedReply(
            model_id=request.model_id,
            worker_id=self.worker_id,
            vectors=vectors.tolist(),
            latency_ms=(time.perf_counter() - started) * 1e3,
        )


def _session_key(model_id: str, session_id: str) -> str:
    return f"{model_id}/{session_id}"
