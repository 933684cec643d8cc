"""Serving a hosted model's requests: generate (local or remote), classify and embed.

Each handler takes a typed request and answers with typed replies: ``generate`` yields the
answer's chunks (the one with a ``finish_reason`` is the last), ``classify`` and ``embed``
return one reply. A standby model is promoted first (a cold start, timed on the first chunk).
A conversation's turns on a local model share its KV cache, recorded as session events; the
prompt prefixes a model's requests share (its template, a system prompt) keep theirs, recorded as
``PrefixKvStored`` / ``PrefixKvEvicted`` after each answer.
"""

from __future__ import annotations

import asyncio
import logging
import time
from collections.abc import AsyncGenerator, Callable, Iterator
from contextlib import contextmanager
from typing import Protocol

import msgspec

from nrt.adapters.bus.errors import (
    INVALID_DIMENSIONS,
    INVALID_LOGIT_BIAS,
    INVALID_RESPONSE_FORMAT,
    NOT_AN_ENCODER,
    BadRequest,
    RemoteError,
)
from nrt.adapters.inference import (
    BatchingGenerator,
    ContextWindowError,
    Encoder,
    GrammarError,
    InferenceError,
    LogitBiasError,
    TemplateError,
    Usage,
)
from nrt.core.events import (
    PrefixKvEvicted,
    PrefixKvStored,
    RouterCalibrated,
    SessionKvEvicted,
    SessionOpened,
    SessionTouched,
)
from nrt.core.manifest import Manifest
from nrt.core.protocol import (
    Calibration,
    ClassifyReply,
    ClassifyRequest,
    EmbedReply,
    EmbedRequest,
    GenerateChunk,
    GenerateRequest,
)
from nrt.core.vocabulary import Reason, Tier
from nrt.hosting import classify
from nrt.hosting.inflight import InFlight
from nrt.hosting.model_host import ModelHost, session_key
from nrt.hosting.model_sources import RemoteEndpoint
from nrt.hosting.prompts import generation_request
from nrt.hosting.remote import answer as remote
from nrt.hosting.remote.transport import RemoteClient
from nrt.hosting.shell_ports import EventSink, SpecLookup

log = logging.getLogger("nrt.worker")

CANNOT_GENERATE = "cannot_generate"  # the error code of a generate request to an encoder


class Residency(Protocol):
    """Makes a standby model resident before it serves (see :meth:`Control.ensure_resident`)."""

    async def ensure_resident(
        self, model_id: str, reason: Reason, cold_start: bool, manifest_version: int = 0
    ) -> float | None: ...


class Serving:
    def __init__(
        self,
        worker_id: str,
        host: ModelHost,
        residency: Residency,
        events: EventSink,
        specs: SpecLookup,
        manifest: Callable[[], Manifest | None] = lambda: None,
        remote_client: RemoteClient | None = None,
    ) -> None:
        self.worker_id, self.host, self.residency, self.events, self.specs = worker_id, host, residency, events, specs
        self.remote = remote_client or RemoteClient()  # the remote tier's endpoints (close it on stop)
        self.manifest = manifest  # the manifest in force (an entry encoder calibrates from its examples)
        self.routers = classify.RouterIndexes()
        self.inflight = InFlight()  # generate requests being answered, for cancels

    @contextmanager
    def active(self, model_id: str) -> Iterator[None]:
        """Count a request in flight on ``model_id`` (reported in heartbeats) while it is served."""
        hosted = self.host.get(model_id)
        hosted.active_requests += 1
        try:
            yield
        finally:
            hosted.active_requests -= 1

    async def generate(self, request: GenerateRequest) -> AsyncGenerator[GenerateChunk, None]:
        model_id = request.model_id
        hosted = self.host.get(model_id)
        if isinstance(hosted.target, RemoteEndpoint):
            answers = remote.generate(self.remote, hosted.target, request, self.specs(model_id), self.worker_id)
            async for answer in answers:
                yield answer
            return
        cold_ms = await self.residency.ensure_resident(model_id, Reason.ON_DEMAND, True, request.manifest_version)
        runtime = self.host.runtime(model_id)
        if not isinstance(runtime, BatchingGenerator):
            raise BadRequest(
                f"model '{model_id}' is an encoder; it can embed or classify, not generate", code=CANNOT_GENERATE
            )
        key = session_key(model_id, request.session_id) if request.session_id else None
        try:
            own = self.host.chat_template(model_id)
            engine_request = generation_request(request, self.specs(model_id), key, own)
        except TemplateError as exc:
            raise BadRequest(str(exc), code="bad_template") from exc
        with self._conversation(model_id, request.session_id):
            try:
                async for chunk in runtime.generate(engine_request):  # one chunk, the last, unless streaming
                    if chunk.usage is not None:
                        self._prefixes_changed(runtime)
                    if chunk.usage is not None and request.session_id:
                        self._session_touched(request.session_id, model_id, runtime, key, chunk.usage)
                    yield GenerateChunk(
                        request_id=request.request_id,
                        model_id=model_id,
                        worker_id=self.worker_id,
                        text=chunk.text,
                        token_ids=chunk.token_ids,
                        finish_reason=chunk.finish_reason,
                        stop_sequence=chunk.stop_sequence,
                        logprobs=chunk.logprobs,
                        usage=chunk.usage,
                        timings=chunk.timings,
                        cold_start_ms=cold_ms,
                    )
                    cold_ms = None  # on the first chunk only
            except ContextWindowError as exc:
                raise RemoteError("context_window_exceeded", str(exc), 400) from exc
            except GrammarError as exc:
                raise RemoteError(INVALID_RESPONSE_FORMAT, str(exc), 400) from exc
            except LogitBiasError as exc:
                raise RemoteError(INVALID_LOGIT_BIAS, str(exc), 400) from exc
            except InferenceError as exc:
                raise RemoteError("inference_failed", str(exc), 500) from exc

    @contextmanager
    def _conversation(self, model_id: str, session_id: str | None) -> Iterator[None]:
        """A turn of ``session_id`` (if any) is in flight: opened on its first turn here, and when that
        makes one too many on the model, the least recently used idle session's KV is evicted."""
        if session_id is None:
            yield
            return
        sessions = self.host.get(model_id).sessions
        if sessions.begin(session_id):
            self.events.emit(SessionOpened(session_id=session_id, model_id=model_id, worker_id=self.worker_id))
            spec = self.specs(model_id)
            if spec is not None:
                for victim in sessions.victims(spec.max_active_sessions):
                    self._evict(model_id, victim, Reason.MAX_ACTIVE_SESSIONS)
        try:
            yield
        finally:
            sessions.end(session_id)

    def _evict(self, model_id: str, session_id: str, reason: Reason) -> None:
        freed = self.host.evict_session(model_id, session_id)
        log.info("evicted the KV of session %s on %s (%s, %d bytes)", session_id, model_id, reason.value, freed)
        self.events.emit(
            SessionKvEvicted(
                session_id=session_id, model_id=model_id, worker_id=self.worker_id, bytes_freed=freed, reason=reason
            )
        )

    def _prefixes_changed(self, runtime: BatchingGenerator) -> None:
        """Record the shared prefixes the runtime stored and evicted since the last answer (its models')."""
        for change in runtime.prefixes.drain():
            if change.action == "stored":
                self.events.emit(
                    PrefixKvStored(
                        model_id=change.owner,
                        worker_id=self.worker_id,
                        prefix_key=change.key,
                        tokens=change.tokens,
                        kv_bytes=change.nbytes,
                    )
                )
            else:
                self.events.emit(
                    PrefixKvEvicted(
                        model_id=change.owner,
                        worker_id=self.worker_id,
                        prefix_key=change.key,
                        bytes_freed=change.nbytes,
                        reason=Reason.PREFIX_CACHE_FULL,
                    )
                )

    def _session_touched(
        self, session_id: str, model_id: str, runtime: BatchingGenerator, key: str | None, usage: Usage
    ) -> None:
        """Record a turn of a conversation: the tokens and measured bytes of the KV kept for it."""
        self.events.emit(
            SessionTouched(
                session_id=session_id,
                model_id=model_id,
                worker_id=self.worker_id,
                cached_tokens=usage.prompt_tokens + usage.completion_tokens,
                kv_bytes=runtime.session_bytes(key) if key else 0,
                reused_tokens=usage.cached_tokens,
            )
        )

    async def classify(self, request: ClassifyRequest) -> ClassifyReply:
        if not request.labels:
            raise BadRequest("classify needs at least one label")
        await self.residency.ensure_resident(request.model_id, Reason.ON_DEMAND, cold_start=True)
        runtime = self.host.runtime(request.model_id)
        started = time.perf_counter()
        model = runtime if isinstance(runtime, Encoder) else runtime.model
        spec = self.specs(request.model_id)
        template = spec.template if spec is not None else None
        # off the event loop, in one thread handoff (an encoder's index is built once, on first use)
        result, calibration = await asyncio.to_thread(classify.classify_with, model, self.routers, request, template)
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

    async def calibrate_at_load(self, model_id: str) -> None:
        """The manifest's entry model sets its own floor as it loads, not at its first request."""
        if self.host.tier(model_id) != Tier.RESIDENT:
            return
        runtime = self.host.runtime(model_id)
        try:
            calibration = await asyncio.to_thread(
                classify.calibration_at_load, self.routers, self.manifest(), model_id, runtime
            )
        except Exception:  # the first request calibrates again, and says what is wrong
            log.exception("router %s could not calibrate from its examples", model_id)
            return
        self._announce(model_id, calibration)

    def forget(self, model_id: str) -> None:
        """An unloaded model's router index goes with it."""
        self.routers.forget(model_id)

    def _announce(self, model_id: str, calibration: Calibration | None) -> None:
        """Record a router model's own floor, once per model and set of labels and examples."""
        if calibration is not None and self.routers.first_time(model_id, calibration):
            fields = msgspec.structs.asdict(calibration)
            self.events.emit(RouterCalibrated(model_id=model_id, worker_id=self.worker_id, **fields))

    async def embed(self, request: EmbedRequest) -> EmbedReply:
        await self.residency.ensure_resident(request.model_id, Reason.ON_DEMAND, cold_start=True)
        runtime = self.host.runtime(request.model_id)
        if not isinstance(runtime, Encoder):
            raise BadRequest(
                f"model '{request.model_id}' is not an encoder; it cannot embed (it generates text: "
                "chat.completions, completions)",
                code=NOT_AN_ENCODER,
            )
        if request.dimensions is not None and request.dimensions != runtime.dimension:
            raise BadRequest(
                f"'dimensions' {request.dimensions} cannot be served by model '{request.model_id}': it was not "
                f"Matryoshka-trained, so its vectors have {runtime.dimension} dimensions and cannot be shortened; "
                "leave 'dimensions' out",
                code=INVALID_DIMENSIONS,
            )
        started = time.perf_counter()
        vectors, tokens = await asyncio.to_thread(runtime.embed_counted, list(request.texts))
        return EmbedReply(
            model_id=request.model_id,
            worker_id=self.worker_id,
            vectors=vectors.tolist(),
            latency_ms=(time.perf_counter() - started) * 1e3,
            prompt_tokens=tokens,
        )
