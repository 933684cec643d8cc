"""Deterministic, realistic event traffic: a manifest, workers, tiers, sessions and requests."""

from __future__ import annotations

import random
import uuid
from datetime import UTC, datetime, timedelta
from typing import TYPE_CHECKING

from nrt.core.events import (
    Event,
    ManifestApplied,
    ModelPlaced,
    RequestAdmitted,
    RequestCompleted,
    RequestRouted,
    SessionKvEvicted,
    SessionOpened,
    SessionTouched,
    TierChanged,
    WorkerJoined,
)
from nrt.core.vocabulary import Reason, Tier

if TYPE_CHECKING:
    from collections.abc import Iterator

MODELS = ("router", "billing", "technical", "legal")
START = datetime(2026, 1, 1, tzinfo=UTC)


def traffic(n_events: int, seed: int = 7, live_sessions: int = 64) -> Iterator[Event]:
    """Exactly ``n_events`` events of a cluster serving routed, session-bearing requests."""
    rng = random.Random(seed)
    ids = uuid.UUID(int=rng.getrandbits(128))
    clock = START
    counter = 0

    def next_id() -> str:
        nonlocal counter
        counter += 1
        return str(uuid.UUID(int=(ids.int + counter) % 2**128))

    def tick() -> datetime:
        nonlocal clock
        clock += timedelta(milliseconds=rng.randint(1, 40))
        return clock

    def setup() -> Iterator[Event]:
        yield ManifestApplied(
            event_id=next_id(), occurred_at=tick(), version=1, cluster="bench", digest="0" * 64, text="cluster: bench\n"
        )
        yield WorkerJoined(
            event_id=next_id(),
            occurred_at=tick(),
            worker_id="w1",
            host="h1",
            cpu_count=2,
            ram_bytes=24 * 2**30,
            providers=("CPUExecutionProvider",),
        )
        for model in MODELS:
            yield ModelPlaced(
                event_id=next_id(),
                occurred_at=tick(),
                model_id=model,
                worker_id="w1",
                artifact=f"catalogue://{model}",
                tier=Tier.RESIDENT,
                manifest_version=1,
            )
            yield TierChanged(
                event_id=next_id(),
                occurred_at=tick(),
                model_id=model,
                worker_id="w1",
                from_tier=Tier.UNLOADED,
                to_tier=Tier.RESIDENT,
                reason=Reason.PLACEMENT,
                elapsed_ms=rng.uniform(50, 400),
                bytes_held=rng.randint(10**6, 10**8),
            )

    def request() -> Iterator[Event]:
        request_id = next_id()
        session = f"s{rng.randrange(live_sessions)}"
        intent = rng.choice(MODELS[1:])
        yield RequestAdmitted(
            event_id=next_id(),
            occurred_at=tick(),
            request_id=request_id,
            manifest_version=1,
            model_id="router",
            session_id=session,
            stream=True,
        )
        scores = {m: rng.random() for m in MODELS[1:]}
        yield RequestRouted(
            event_id=next_id(),
            occurred_at=tick(),
            request_id=request_id,
            manifest_version=1,
            model_id="router",
            worker_id="w1",
            intent=intent,
            scores=scores,
            confidence=scores[intent],
            threshold=0.0,
            target=intent,
            rule="router.output.intent -> specialists.{intent}",
            latency_ms=rng.uniform(1, 5),
        )
        yield SessionOpened(event_id=next_id(), occurred_at=tick(), session_id=session, model_id=intent, worker_id="w1")
        yield SessionTouched(
            event_id=next_id(),
            occurred_at=tick(),
            session_id=session,
            model_id=intent,
            worker_id="w1",
            cached_tokens=rng.randint(10, 500),
            kv_bytes=rng.randint(10**4, 10**6),
        )
        if rng.random() < 0.1:
            yield SessionKvEvicted(
                event_id=next_id(),
                occurred_at=tick(),
                session_id=session,
                model_id=intent,
                worker_id="w1",
                bytes_freed=rng.randint(10**4, 10**6),
                reason=Reason.IDLE,
            )
        yield RequestCompleted(
            event_id=next_id(),
            occurred_at=tick(),
            request_id=request_id,
            manifest_version=1,
            model_id=intent,
            prompt_tokens=rng.randint(5, 200),
            completion_tokens=rng.randint(1, 100),
            latency_ms=rng.uniform(20, 900),
            ttft_ms=rng.uniform(5, 100),
        )

    emitted = 0
    for event in setup():
        if emitted == n_events:
            return
        yield event
        emitted += 1
    while True:
        for event in request():
            if emitted == n_events:
                return
            yield event
            emitted += 1
