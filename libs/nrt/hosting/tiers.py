"""A hosted model's tier steps: one at a time per model, each measured and recorded as a ``TierChanged``.

Loading takes a model from unloaded to standby (its bytes in RAM; or remote, for an endpoint)
and on to resident (a live session) when asked; its subject is served from before its first
tier is announced until it is unloaded. A load that fails withdraws the placement in the log.
"""

from __future__ import annotations

import asyncio
import time
from collections.abc import Callable
from functools import partial

from nrt.adapters.bus.errors import RemoteError
from nrt.adapters.catalogue.sources import HF_INFERENCE_URL
from nrt.adapters.metrics import WorkerMetrics
from nrt.core.events import TierChanged, Weights
from nrt.core.vocabulary import Reason, Tier
from nrt.hosting.artifact_share import ArtifactShare
from nrt.hosting.model_host import ModelHost, Transition
from nrt.hosting.model_sources import resolve, weights_of
from nrt.hosting.shell_ports import EventSink, Loaded, ModelSubjects, SpecLookup

MAX_ERROR_CHARS = 1000  # of a failed load's reason in its event: enough to act on, bounded


def load_error(exc: Exception) -> str:
    """Why a load failed, for the log: a bus error's ``code: message``, else the exception's type and text."""
    text = str(exc) if isinstance(exc, RemoteError) else f"{type(exc).__name__}: {exc}"
    return text if len(text) <= MAX_ERROR_CHARS else text[: MAX_ERROR_CHARS - 3] + "..."


class Tiers:
    def __init__(
        self,
        worker_id: str,
        host: ModelHost,
        events: EventSink,
        specs: SpecLookup,
        model_subjects: ModelSubjects,
        loaded: Loaded | None = None,
        metrics: WorkerMetrics | None = None,
        hub_url: str = HF_INFERENCE_URL,
        share: ArtifactShare | None = None,
    ) -> None:
        self.metrics = metrics
        self.share = share  # the cluster's prepared artifacts: fetched before preparing, published after
        self.hub_url = hub_url  # where an hf:// model at tier remote is served, unless its entry says
        self.worker_id, self.host, self.events, self.specs = worker_id, host, events, specs
        self.model_subjects = model_subjects
        self.loaded = loaded  # told of each model once its load is recorded (an entry router calibrates)
        self._locks: dict[str, asyncio.Lock] = {}

    async def load(self, model_id: str, source: str, tier: Tier, reason: Reason) -> list[Transition]:
        """unloaded -> standby (or remote), then -> resident if ``tier`` is resident; the steps taken."""
        async with self._lock(model_id):
            spec = self.specs(model_id)
            started = time.perf_counter()
            try:
                # a checkpoint not prepared yet is fetched from the cluster or prepared here: off the event loop
                target = await asyncio.to_thread(partial(resolve, source, spec, hub_url=self.hub_url, share=self.share))
                weights = await asyncio.to_thread(weights_of, target)
                steps = [await asyncio.to_thread(self.host.load, model_id, source, target)]
            except Exception as exc:
                if model_id not in self.host.hosted:  # the placement did not happen: say so in the log, and why
                    elapsed_ms = (time.perf_counter() - started) * 1e3
                    withdrawn = Transition(model_id, Tier.UNLOADED, Tier.UNLOADED, elapsed_ms, 0)
                    self._record(withdrawn, Reason.LOAD_FAILED, error=load_error(exc))
                raise
            # Subscribed before any tier is announced: once the log says a worker holds the
            # model, a request for it reaches one (it waits on this lock while we promote).
            await self.model_subjects.subscribe(model_id)
            if tier == Tier.RESIDENT:
                steps.append(await asyncio.to_thread(self.host.promote, model_id))
            if any(step.changed for step in steps):
                for step in steps:
                    self._record(step, reason, weights=weights if step.from_tier == Tier.UNLOADED else None)
            else:
                # Told to load what it already holds: cluster_state's view has lost this placement
                # (it declared the worker lost, say, while a long load held it up). Answer with the
                # real state, in the log too, or the placement would be retried without end.
                self._record(steps[-1], reason, held=True)
            if self.loaded is not None:
                await self.loaded(model_id)
        return steps

    async def promote(self, model_id: str, reason: Reason, cold_start: bool) -> float | None:
        """standby -> resident, measured and recorded; the milliseconds, or None if it was not standby."""
        async with self._lock(model_id):
            if self.host.tier(model_id) != Tier.STANDBY:
                return None
            step = await asyncio.to_thread(self.host.promote, model_id)
            self._record(step, reason, cold_start=cold_start)
            return step.elapsed_ms

    async def demote(self, model_id: str, reason: Reason) -> None:
        """resident -> standby (the session goes when no other model id uses it)."""
        await self._step_down(model_id, self.host.demote, reason)

    async def unload(self, model_id: str, reason: Reason) -> None:
        """-> unloaded; its subject is no longer served here."""
        await self._step_down(model_id, self.host.unload, reason)
        await self.model_subjects.unsubscribe(model_id)

    async def _step_down(self, model_id: str, change: Callable[[str], Transition], reason: Reason) -> None:
        self.host.get(model_id)  # not hosted: a clear error, before waiting for the lock
        async with self._lock(model_id):
            self._record(await asyncio.to_thread(change, model_id), reason)

    def _lock(self, model_id: str) -> asyncio.Lock:
        return self._locks.setdefault(model_id, asyncio.Lock())

    def _record(
        self,
        step: Transition,
        reason: Reason,
        cold_start: bool = False,
        held: bool = False,
        error: str | None = None,
        weights: Weights | None = None,
    ) -> None:
        """Record a measured tier change; none for a step that changed nothing, except a failed
        load (unloaded -> unloaded), which withdraws the placement the log announced, and a load
        of a model already ``held`` here, which re-announces its tier (from and to the same)."""
        if step.changed and self.metrics is not None:
            self._measure(step, reason, cold_start)
        if step.changed or held or reason == Reason.LOAD_FAILED:
            self.events.emit(
                TierChanged(
                    model_id=step.model_id,
                    worker_id=self.worker_id,
                    from_tier=step.from_tier,
                    to_tier=step.to_tier,
                    reason=reason,
                    elapsed_ms=step.elapsed_ms,
                    bytes_held=step.bytes_held,
                    cold_start=cold_start,
                    error=error,
                    weights=weights,
                )
            )

    def _measure(self, step: Transition, reason: Reason, cold_start: bool) -> None:
        assert self.metrics is not None
        m = self.metrics
        m.transitions.labels(m.worker_id, step.model_id, step.from_tier.value, step.to_tier.value, reason.value).inc()
        if cold_start:
            m.cold_start.labels(m.worker_id, step.model_id).observe(step.elapsed_ms / 1e3)
