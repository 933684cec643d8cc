"""Control: the commands cluster_state sends a worker, and the promotion a waiting request needs.

A command (``ControlCommand`` on ``nrt.control.<worker_id>``) loads, promotes, demotes or
unloads a model (the steps are :class:`Tiers`'), or evicts a session's KV cache. A request
that finds its model standby asks cluster_state for room in the budget first.
"""

from __future__ import annotations

import logging
import time

from nrt.adapters.bus.errors import BadRequest, RemoteError
from nrt.core.events import SessionKvEvicted
from nrt.core.protocol import ControlCommand, ControlReply, PromoteModel
from nrt.core.vocabulary import Reason, Tier
from nrt.hosting.model_host import ModelHost
from nrt.hosting.shell_ports import AskPromotion, EventSink
from nrt.hosting.tiers import Tiers

log = logging.getLogger("nrt.worker")

# cluster_state's answers to an on-demand promotion that the request must get: no room in the
# budget. Any other failure to ask (no cluster_state, a placement it does not know yet) is
# not the request's fault: the worker promotes the model itself.
BUDGET_REFUSALS = frozenset({"budget_exhausted"})


class Control:
    def __init__(
        self, worker_id: str, host: ModelHost, tiers: Tiers, events: EventSink, ask_promotion: AskPromotion
    ) -> None:
        self.worker_id, self.host, self.tiers, self.events = worker_id, host, tiers, events
        self.ask_promotion = ask_promotion

    async def handle(self, command: ControlCommand) -> ControlReply:
        """Carry out ``command``: the model's tier and bytes afterwards, and whether anything changed."""
        model_id, started = command.model_id, time.perf_counter()
        before = self.host.tier(model_id)
        if command.action == "load":
            if command.source is None or command.tier is None:
                raise BadRequest("load needs a source and a tier")
            await self.tiers.load(model_id, command.source, command.tier, command.reason)
        elif command.action == "promote":
            self.host.get(model_id)
            # a promotion that a waiting request asked for (on_demand) is that request's cold start
            await self.tiers.promote(model_id, command.reason, cold_start=command.reason == Reason.ON_DEMAND)
        elif command.action == "demote":
            await self.tiers.demote(model_id, command.reason)
        elif command.action == "unload":
            await self.tiers.unload(model_id, command.reason)
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

    async def ensure_resident(
        self, model_id: str, reason: Reason, cold_start: bool, manifest_version: int = 0
    ) -> float | None:
        """Promote ``model_id`` if it is standby; the milliseconds it took, or None if it was ready.

        A request that finds its model standby (``cold_start``) asks cluster_state first
        (``nrt.models.promote``): it applies the budget, demoting the least recently used
        non-critical residents to make room, then sends this worker the promote command; when
        nothing can go, the request fails with that 503 and its reason. If cluster_state does
        not answer, the worker promotes the model itself (serving comes first) and the budget
        is enforced after the fact once cluster_state sees the change.
        """
        if self.host.tier(model_id) in (Tier.RESIDENT, Tier.REMOTE):
            return None
        started = time.perf_counter()
        if cold_start:
            await self._promote_within_budget(model_id, manifest_version)
            if self.host.tier(model_id) in (Tier.RESIDENT, Tier.REMOTE):
                return (time.perf_counter() - started) * 1e3
        return await self.tiers.promote(model_id, reason, cold_start)

    async def _promote_within_budget(self, model_id: str, manifest_version: int) -> None:
        ask = PromoteModel(
            model_id=model_id, reason=Reason.ON_DEMAND, worker_id=self.worker_id, manifest_version=manifest_version
        )
        try:
            await self.ask_promotion(ask)
        except RemoteError as exc:
            if exc.code in BUDGET_REFUSALS:
                raise
            log.warning("cluster_state did not promote %s (%s); promoting it here", model_id, exc.message)

    def evict_session(self, model_id: str, session_id: str, reason: Reason) -> int:
        """Drop a conversation's KV cache (held only while the model is resident); the bytes freed."""
        freed = self.host.evict_session(model_id, session_id)
        self.events.emit(
            SessionKvEvicted(
                session_id=session_id, model_id=model_id, worker_id=self.worker_id, bytes_freed=freed, reason=reason
            )
        )
        return freed
