"""The one fact every admitted request ends with, and the jobs that follow it, each a handler.

``AdmittedRequest`` ends once, answered or failed, and hands a ``RequestEnded`` to each handler
in turn: ``measure`` (this gateway's Prometheus figures), ``charge`` (the caller's token bucket, shared by the gateways),
``emit`` (``RequestCompleted`` / ``RequestFailed`` into the log) and ``cancel_generation`` (tells
the worker to stop when nobody will read the rest). The event itself is ``event_of``, pure.
"""

from __future__ import annotations

import asyncio
from collections.abc import Callable
from dataclasses import dataclass

from nats.aio.client import Client

from api_gateway.errors import ApiError
from api_gateway.reply_stream import BUS_LOST
from api_gateway.shaping import Transcript
from api_gateway.shared_limits import SharedRateLimiter
from nrt.adapters.bus import rpc, subjects
from nrt.adapters.bus.emitter import EventEmitter
from nrt.adapters.metrics import DIRECT, UNROUTED, GatewayMetrics, route_outcome
from nrt.core.events import RequestCompleted, RequestFailed, request_end_id
from nrt.core.protocol import Cancel

CLIENT_GONE = 499
CLIENT_DISCONNECTED = "client_disconnected"
# the failures that leave a worker generating an answer nobody will read: it gets a cancel
WORKER_STILL_GENERATING = frozenset({CLIENT_DISCONNECTED, BUS_LOST})
_cancels: set[asyncio.Task[None]] = set()  # cancels on their way to the workers


@dataclass(frozen=True)
class RequestEnded:
    """One admitted request has ended: answered (``error`` None) or failed with ``error``."""

    transcript: Transcript
    key_id: str | None  # the API key the usage is charged to (None: no key, authentication off)
    ended: float  # time.perf_counter() when it ended
    error: ApiError | None = None

    @property
    def status(self) -> int:
        return 200 if self.error is None else self.error.status


RequestEndedHandler = Callable[[RequestEnded], None]


def event_of(fact: RequestEnded) -> RequestCompleted | RequestFailed:
    """The event that records how the request ended, under the manifest version it was admitted with; its id is the
    request's end id, the same as cluster_state's ``owner_lost`` for it (a request ends once in the log)."""
    t = fact.transcript
    if fact.error is not None:
        return RequestFailed(
            event_id=request_end_id(t.request_id),
            request_id=t.request_id,
            manifest_version=t.manifest_version,
            code=fact.error.code or "error",
            message=fact.error.message,
            status=fact.error.status,
            model_id=t.final_model,
            key_id=fact.key_id,
        )
    usage = t.usage()
    return RequestCompleted(
        event_id=request_end_id(t.request_id),
        request_id=t.request_id,
        manifest_version=t.manifest_version,
        model_id=t.final_model,
        prompt_tokens=usage.prompt_tokens,
        completion_tokens=usage.completion_tokens,
        latency_ms=(fact.ended - t.started) * 1000.0,
        ttft_ms=(t.first_token_at - t.started) * 1000.0 if t.first_token_at is not None else None,
        finish_reason=t.finish_reason(),
        key_id=fact.key_id,
    )


def emit(emitter: EventEmitter) -> RequestEndedHandler:
    def handle(fact: RequestEnded) -> None:
        emitter.emit(event_of(fact))

    return handle


def measure(metrics: GatewayMetrics) -> RequestEndedHandler:
    """The request's figures: its outcome and status; for an answer, its latencies and tokens."""

    def handle(fact: RequestEnded) -> None:
        t = fact.transcript
        model = t.final_model
        if t.dispatch is not None:
            outcome = route_outcome(t.dispatch.intent, t.dispatch.target, t.dispatch.entry_model)
        else:
            outcome = UNROUTED if t.routed else DIRECT
        metrics.requests.labels(model, outcome, str(fact.status)).inc()
        if fact.error is not None:
            return
        metrics.duration.labels(model).observe(fact.ended - t.started)
        if t.first_token_at is not None:
            metrics.ttft.labels(model).observe(t.first_token_at - t.started)
        usage = t.usage()
        metrics.tokens.labels(model, "in").inc(usage.prompt_tokens)
        metrics.tokens.labels(model, "out").inc(usage.completion_tokens)

    return handle


def charge(limiter: SharedRateLimiter) -> RequestEndedHandler:
    """An answered request's tokens count against its key's token limit."""

    def handle(fact: RequestEnded) -> None:
        if fact.error is None:
            usage = fact.transcript.usage()
            limiter.charge(fact.key_id, usage.prompt_tokens + usage.completion_tokens)

    return handle


def cancel_generation(nc: Client) -> RequestEndedHandler:
    """Tell the workers to stop generating a request nobody will read (nats-py holds it while reconnecting)."""

    def handle(fact: RequestEnded) -> None:
        if fact.error is None or fact.error.code not in WORKER_STILL_GENERATING:
            return
        cancel = Cancel(request_id=fact.transcript.request_id, reason=fact.error.code)
        task = asyncio.get_running_loop().create_task(nc.publish(subjects.CANCEL, rpc.encode(cancel)))
        _cancels.add(task)
        task.add_done_callback(_cancels.discard)

    return handle
