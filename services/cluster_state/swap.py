"""The drained manifest swap, served on ``nrt.manifest.apply``.

ApplyManifest -> validate -> plan (reject what cannot fit) -> place, load and warm the
added models while the old manifest serves -> ``DrainStarted`` -> wait for the requests
admitted under the old version (or ``drain.timeout``) -> ``ManifestApplied`` n+1 ->
``DrainCompleted`` -> unload dropped models, move re-tiered ones -> ``ApplyResult``.
Every step is an event. A swap that fails before the cut-over undoes its warm-up and
leaves the old manifest serving (``DrainCompleted`` ``aborted`` if the drain had begun).
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import time
from collections.abc import Mapping

from cluster_state.controller import Controller, Outcome, parse_in_force, utc_now
from nrt.bus.errors import BadRequest, RemoteError
from nrt.bus.jetstream import EventPublisher
from nrt.events import DrainCompleted, DrainStarted, ManifestApplied
from nrt.manifest import Manifest, ManifestError
from nrt.policies import SwapPlan, SwapRejected, after_cutover, plan_swap, undo_warm
from nrt.protocol import ApplyManifest, ApplyResult
from nrt.vocabulary import ApplyOutcome, DrainOutcome

log = logging.getLogger("nrt.cluster_state.swap")

ADMISSION_SETTLE_S = 0.2  # requests admitted just before the gateway saw DrainStarted get this long to be recorded


async def outcomes(tasks: Mapping[str, asyncio.Task[Outcome]]) -> list[Outcome]:
    return list(await asyncio.gather(*tasks.values())) if tasks else []


class Swapper:
    def __init__(self, controller: Controller, publisher: EventPublisher) -> None:
        self.controller = controller
        self.publisher = publisher
        self._lock = asyncio.Lock()
        self._target: int | None = None

    async def apply(self, request: ApplyManifest) -> ApplyResult:
        if self._lock.locked():
            raise RemoteError(
                "swap_in_progress",
                f"a manifest swap to v{self._target} is in progress; apply again when it has completed",
                409,
            )
        async with self._lock:
            return await self._apply(request)

    async def _apply(self, request: ApplyManifest) -> ApplyResult:
        c = self.controller
        from_version = c.cluster.manifest_version
        try:
            new = parse_in_force(request.text, from_version + 1)
        except ManifestError as exc:
            problems = [p.render(f"manifest v{from_version + 1}") for p in exc.problems]
            raise BadRequest(
                f"the manifest has {len(problems)} problem(s): " + "; ".join(problems), code="invalid_manifest"
            ) from None
        if c.cluster.manifest_text is not None and new.digest == c.cluster.manifest_digest:
            return ApplyResult(
                from_version=from_version, to_version=from_version, outcome=ApplyOutcome.UNCHANGED, drained_ms=0.0
            )
        now = utc_now()
        plan = plan_swap(c.state, c.manifest, new, now, f"swap:v{from_version}:{new.digest}@{now.isoformat()}")
        if isinstance(plan, SwapRejected):
            raise RemoteError("manifest_does_not_fit", plan.message, 422)
        self._target = plan.to_version
        log.info(
            "swap v%d -> v%d requested by %s: adds %s, drops %s, warms %s",
            plan.from_version,
            plan.to_version,
            request.requested_by,
            ", ".join(plan.added) or "nothing",
            ", ".join(plan.removed) or "nothing",
            ", ".join(plan.warmed) or "nothing",
        )
        started = time.perf_counter()
        await self._warm(plan)
        warmed_ms = (time.perf_counter() - started) * 1e3
        if from_version == 0:
            await self._publish_applied(new, plan.to_version)
            return ApplyResult(
                from_version=0,
                to_version=plan.to_version,
                outcome=ApplyOutcome.APPLIED,
                drained_ms=0.0,
                warmed=plan.warmed,
            )
        waited_ms, outcome, abandoned = await self._drain(plan, new)
        try:
            await self._publish_applied(new, plan.to_version)
        except Exception as exc:
            await self.publisher.publish(
                DrainCompleted(
                    from_version=plan.from_version,
                    to_version=plan.to_version,
                    outcome=DrainOutcome.ABORTED,
                    waited_ms=waited_ms,
                    abandoned=abandoned,
                )
            )
            await outcomes(c.execute(undo_warm(plan)))
            raise RemoteError(
                "swap_failed", f"the cut-over failed ({exc}); manifest v{plan.from_version} is still serving", 503
            ) from exc
        await self.publisher.publish(
            DrainCompleted(
                from_version=plan.from_version,
                to_version=plan.to_version,
                outcome=outcome,
                waited_ms=waited_ms,
                abandoned=abandoned,
            )
        )
        await c.wait_for(lambda s: s.manifest_version >= plan.to_version, within=30)
        await outcomes(c.execute(after_cutover(c.state, new, plan, utc_now())))
        log.info(
            "swap v%d -> v%d done: warmed in %.0f ms, %s after %.0f ms (%d abandoned)",
            plan.from_version,
            plan.to_version,
            warmed_ms,
            outcome,
            waited_ms,
            abandoned,
        )
        return ApplyResult(
            from_version=plan.from_version,
            to_version=plan.to_version,
            outcome=ApplyOutcome.APPLIED,
            drained_ms=waited_ms,
            warmed=plan.warmed,
            abandoned=abandoned,
        )

    async def _warm(self, plan: SwapPlan) -> None:
        """Place and load the added models beside the old ones; undo everything if one fails."""
        results = await outcomes(self.controller.execute(plan.warm))
        failed = [o for o in results if not o.ok]
        if not failed:
            return
        await outcomes(self.controller.execute(undo_warm(plan)))
        first = failed[0]
        error = first.error or RemoteError("swap_failed", "a warm-up command did not run", 503)
        model = first.group.removeprefix("warm:")
        status = error.status if 400 <= error.status < 500 else 503
        raise RemoteError(
            "swap_failed",
            f"could not load {model} for manifest v{plan.to_version}: {error.message}; "
            f"manifest v{plan.from_version} is still serving",
            status,
        )

    async def _drain(self, plan: SwapPlan, new: Manifest) -> tuple[float, DrainOutcome, int]:
        """Stop admissions, wait for the old version's requests; (waited ms, outcome, abandoned)."""
        c = self.controller
        timeout = new.drain.timeout
        await self.publisher.publish(
            DrainStarted(
                from_version=plan.from_version,
                to_version=plan.to_version,
                in_flight=c.cluster.in_flight_under(plan.from_version),
                timeout_s=timeout,
            )
        )
        started = time.perf_counter()
        # Requests admitted before the gateway saw DrainStarted are recorded before it or just after.
        with contextlib.suppress(TimeoutError):
            await c.wait_for(lambda s: s.draining, within=timeout)
        await asyncio.sleep(ADMISSION_SETTLE_S)
        left = max(0.0, timeout - (time.perf_counter() - started))
        try:
            await c.wait_for(lambda s: s.in_flight_under(plan.from_version) == 0, within=left)
            outcome = DrainOutcome.DRAINED
        except TimeoutError:
            outcome = DrainOutcome.TIMED_OUT
        waited_ms = (time.perf_counter() - started) * 1e3
        return waited_ms, outcome, c.cluster.in_flight_under(plan.from_version)

    async def _publish_applied(self, new: Manifest, version: int) -> None:
        await self.publisher.publish(
            ManifestApplied(version=version, cluster=new.cluster, digest=new.digest, text=new.text)
        )
