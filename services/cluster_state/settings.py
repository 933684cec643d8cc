"""cluster_state settings from the environment."""

from __future__ import annotations

from pathlib import Path

from pydantic import Field

from nrt.policies import Tuning
from nrt.settings import HeartbeatSettings


class ClusterStateSettings(HeartbeatSettings):
    """What cluster_state reads: the shared settings, the heartbeat, and its bootstrap manifest."""

    manifest: Path | None = Field(
        default=None, description="the manifest cluster_state applies on its first start (`nrt up` sets it)"
    )
    missed_heartbeats: int = Field(
        default=Tuning().missed_beats, ge=1, description="heartbeats a worker may miss before it is declared lost"
    )

    def tuning(self) -> Tuning:
        """The policies' timing, as configured."""
        return Tuning(heartbeat_s=self.heartbeat_s, missed_beats=self.missed_heartbeats)
