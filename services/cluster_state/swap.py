"""The drained manifest swap, served on ``nrt.manifest.apply``: the shell of ``nrt.core.policies.swap_machine``.

ApplyManifest -> parse (400 with every problem) -> ``start_swap`` -> run its commands, feed
back how each group ran (``GroupRan``) and tick while waiting (``Tick``), until the swap is
done (``ApplyResult``) or aborted (an error frame with its code, message and status). The
machine decides every step: warm-up, drain, cut-over, clean-up, undo. One swap at a time.
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Iterable, Mapping

from cluster_state.controller import Controller, Outcome, parse_in_force, utc_now
from nrt.adapters.bus.errors import BadRequest, RemoteError
from nrt.core.manifest import ManifestError
from nrt.core.policies import GroupRan, Swap, SwapStep, SwapTrigger, Tick, advance_swap, start_swap
from nrt.core.protocol import ApplyManifest, ApplyResult

log = logging.getLogger("nrt.cluster_state.swap")

TICK_S = 0.05  # how often a running swap looks at the log and the clock


async def outcomes(tasks: Mapping[str, asyncio.Task[Outcome]]) -> list[Outcome]:
    return list(await asyncio.gather(*tasks.values())) if tasks else []


def group_ran(outcome: Outcome) -> GroupRan:
    """How a group of commands went, as the swap machine reads it."""
    error = outcome.error
    if error is not None:
        message, status = error.message, error.status
    elif outcome.refused is not None:
        message, status = outcome.refused.reason, 503
    else:
        message, status = "", 503
    published = tuple(e.event_id for e in outcome.published)
    return GroupRan(outcome.group, outcome.ok, published, message, status)


class Swapper:
    def __init__(self, controller: Controller) -> None:
        self.controller = controller
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
        version = c.cluster.manifest_version + 1
        try:
            new = parse_in_force(request.text, version)
        except ManifestError as exc:
            raise BadRequest(exc.summary(f"manifest v{version}"), code="invalid_manifest") from None
        step = start_swap(c.state, c.manifest, new, utc_now())
        self._target = step.swap.to_version
        if (plan := step.swap.plan) is not None:
            log.info(
                "swap v%d -> v%d requested by %s: adds %s, drops %s, warms %s",
                plan.from_version,
                plan.to_version,
                request.requested_by,
                ", ".join(plan.added) or "nothing",
                ", ".join(plan.removed) or "nothing",
                ", ".join(plan.warmed) or "nothing",
            )
        swap = await self._run(step)
        if swap.failure is not None:
            log.warning("swap v%d -> v%d failed: %s", swap.from_version, swap.to_version, swap.failure.message)
            raise RemoteError(swap.failure.code, swap.failure.message, swap.failure.status)
        if swap.result is None:  # pragma: no cover - a finished swap has a result or a failure
            raise RemoteError("swap_failed", "the swap ended without a result", 500)
        if swap.plan is not None:
            log.info(
                "swap v%d -> v%d done: %s after %.0f ms (%d abandoned)",
                swap.from_version,
                swap.to_version,
                swap.outcome or "applied",
                swap.waited_ms,
                swap.abandoned,
            )
        return swap.result

    async def _run(self, step: SwapStep) -> Swap:
        """Run the machine's commands and feed it what happened, until it is finished."""
        c = self.controller
        swap, running = step.swap, set(c.execute(step.commands).values())
        while not swap.finished:
            done: Iterable[asyncio.Task[Outcome]] = ()
            if running:
                done, running = await asyncio.wait(running, timeout=TICK_S)
            else:
                await asyncio.sleep(TICK_S)
            now = utc_now()
            triggers: list[SwapTrigger] = [*(group_ran(task.result()) for task in done), Tick()]
            for trigger in triggers:
                step = advance_swap(swap, c.state, trigger, now)
                swap = step.swap
                running |= set(c.execute(step.commands, now).values())
        if running:
            await asyncio.wait(running)  # the undo or the clean-up: the reply follows them, as the log does
        return swap
