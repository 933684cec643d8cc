"""What the worker's jobs need from the shell around them; :mod:`nrt.hosting.worker` provides it over NATS.

The jobs (presence, tiers and control, serving) make no transport call of their own: they
publish, send and ask through these, so a test can hand them fakes and the shell can change
its transport without touching them.
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable
from typing import Protocol

from nrt.core.events import Event
from nrt.core.manifest import ModelSpec
from nrt.core.protocol import PromoteModel, PromoteResult, WorkerHeartbeat

SpecLookup = Callable[[str], ModelSpec | None]  # a model's spec in the manifest in force; None without one
SendHeartbeat = Callable[[WorkerHeartbeat], Awaitable[None]]  # -> nrt.workers.heartbeat
AskPromotion = Callable[[PromoteModel], Awaitable[PromoteResult]]  # -> cluster_state (nrt.models.promote)
Loaded = Callable[[str], Awaitable[None]]  # after a model's load is recorded (the serving job's turn)


class Publisher(Protocol):
    """Stores an event in the event stream and returns once it is stored (its stream sequence)."""

    async def publish(self, event: Event) -> int: ...


class EventSink(Protocol):
    """Where a job records a fact: ``emit`` returns at once, the event is published in the background."""

    def emit(self, event: Event) -> None: ...


class ModelSubjects(Protocol):
    """The subject a hosted model's requests arrive on: served from its load until its unload."""

    async def subscribe(self, model_id: str) -> None: ...

    async def unsubscribe(self, model_id: str) -> None: ...
