"""Whether the folded cluster state says some live worker serves a model."""

from __future__ import annotations

from nrt.core.state import ClusterState
from nrt.core.vocabulary import Tier

SERVING_TIERS = (Tier.RESIDENT, Tier.STANDBY, Tier.REMOTE)  # standby: the worker promotes it on demand


def serving_workers(state: ClusterState, model_id: str) -> tuple[str, ...]:
    """The live workers that hold ``model_id`` at a tier that can answer, in worker id order."""
    model = state.models.get(model_id)
    if model is None:
        return ()
    return tuple(
        sorted(
            worker_id
            for worker_id, placement in model.placements.items()
            if placement.tier in SERVING_TIERS and (w := state.workers.get(worker_id)) is not None and w.alive
        )
    )
