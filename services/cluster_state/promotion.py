"""``nrt.models.promote``: make a model resident now, within the budget, or say why not.

The policies decide (``PromoteWanted``: demote the least recently used non-critical
residents first, or refuse with the numbers); this handler runs their commands through the
controller and answers when the model is resident, or with an error frame: 404 for an
unknown model, 503 ``budget_exhausted`` / ``not_placed`` / ``promotion_failed``.
"""

from __future__ import annotations

import contextlib
import time

from cluster_state.controller import Controller
from cluster_state.swap import outcomes
from nrt.adapters.bus.errors import RemoteError, Unavailable
from nrt.core.policies import PromoteWanted
from nrt.core.policies.placement import where
from nrt.core.protocol import PromoteModel, PromoteResult
from nrt.core.state import ClusterState

PROMOTE_WITHIN_S = 60.0  # for the model to become resident, another change of it in flight included
DECIDE_AGAIN_S = 0.25  # while another change of the model is in flight: how often to decide again
_REFUSAL_STATUS = {"unknown_model": 404, "not_placed": 503, "budget_exhausted": 503}


async def promote(c: Controller, request: PromoteModel) -> PromoteResult:
    """Make a model resident now, demoting the least recently used first if the budget needs it."""
    started = time.perf_counter()
    if request.manifest_version > c.cluster.manifest_version:
        # The gateway admits requests under a new version as soon as it sees ManifestApplied;
        # our fold has it once the recorder has written it: decide under that version.
        with contextlib.suppress(TimeoutError):
            await c.wait_for(lambda s: s.manifest_version >= request.manifest_version, within=10)
    wanted = PromoteWanted(model_id=request.model_id, reason=request.reason, worker_id=request.worker_id)
    deadline = started + PROMOTE_WITHIN_S
    while True:
        results = await outcomes(c.react(wanted))
        for outcome in results:
            if outcome.refused is not None:
                refused = outcome.refused
                raise RemoteError(refused.code, refused.reason, _REFUSAL_STATUS.get(refused.code, 503))
            if outcome.error is not None:
                raise Unavailable(
                    f"promoting {request.model_id} failed: {outcome.error.message}", code="promotion_failed"
                )
        if results or _resident(c.state.cluster, request.model_id):
            break
        # Another change of this model is in flight: a promotion (wait for it to show in the log), or a load or
        # demotion whose end is not folded yet (then decide again once it is: nothing else would promote it).
        left = deadline - time.perf_counter()
        if left <= 0:
            raise Unavailable(
                f"model '{request.model_id}' did not become resident within {PROMOTE_WITHIN_S:g}s",
                code="promotion_timeout",
            )
        with contextlib.suppress(TimeoutError):
            await c.wait_for(lambda s: _resident(s, request.model_id), within=min(left, DECIDE_AGAIN_S))
    worker_id = request.worker_id
    if worker_id is None or c.state.tier_of(request.model_id, worker_id) == "unloaded":
        worker_id = where(c.state, request.model_id)
    if worker_id is None:
        raise Unavailable(f"model '{request.model_id}' is not placed on any live worker", code="not_placed")
    demoted = tuple(r.model_id for o in results for r in o.replies if r.model_id != request.model_id)
    return PromoteResult(
        model_id=request.model_id,
        worker_id=worker_id,
        tier=c.state.tier_of(request.model_id, worker_id),
        demoted=demoted,
        elapsed_ms=(time.perf_counter() - started) * 1e3,
    )


def _resident(state: ClusterState, model_id: str) -> bool:
    model = state.models.get(model_id)
    return model is not None and any(p.tier in ("resident", "remote") for p in model.placements.values())
