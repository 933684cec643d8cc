"""cluster_state settings from the environment."""

from __future__ import annotations

from pathlib import Path

from pydantic import Field, SecretStr

from nrt.adapters.settings import EventsStreamSettings, HeartbeatSettings
from nrt.core.eventlog import LeaseTerms
from nrt.core.policies import Tuning
from nrt.core.vocabulary import KeyScope


class ClusterStateSettings(HeartbeatSettings, EventsStreamSettings):
    """What cluster_state reads: the shared settings, the heartbeat, the events stream's retention, its
    bootstrap manifest, snapshots and the leader's lease."""

    manifest: Path | None = Field(
        default=None,
        description="the manifest cluster_state applies at start: version 1 on an empty log; one that differs "
        "from the manifest in force is swapped in as the next version (`nrt up` sets it)",
    )
    api_key: SecretStr | None = Field(
        default=None,
        description="an `infer` API key: cluster_state records its hash at start (`nrt up` sets it); "
        "`nrt chat` / `nrt status` send it",
        json_schema_extra={"default_text": "unset (`nrt up`: its keys file, else a new key)"},
    )
    admin_key: SecretStr | None = Field(
        default=None,
        description="an `admin` API key: cluster_state records its hash at start (`nrt up` sets it); "
        "`nrt keys` sends it",
        json_schema_extra={"default_text": "unset (`nrt up`: its keys file, else a new key)"},
    )
    missed_heartbeats: int = Field(
        default=Tuning().missed_beats, ge=1, description="heartbeats a worker may miss before it is declared lost"
    )

    snapshot_every_events: int = Field(
        default=10_000,
        ge=1,
        description="snapshot the folded state after this many events (a restart folds only the rest)",
    )
    snapshot_every_s: float = Field(
        default=60.0, gt=0, description="snapshot the folded state at least this often while events arrive (seconds)"
    )

    leader_lease_s: float = Field(
        default=LeaseTerms().lease_s,
        gt=0,
        description="the leader's lease on the event log (seconds): a standby cluster_state takes over about this "
        "long after the leader dies (a clean stop hands over at once); the leader stops acting when it could not "
        "renew it for this long",
    )
    leader_renew_s: float = Field(
        default=LeaseTerms().renew_s,
        gt=0,
        description="how often the leader renews its lease (seconds); at most half the lease. A standby tries "
        "to take over twice as often",
    )

    def lease(self) -> LeaseTerms:
        """The leader's lease, as configured (LeaseError when the two do not fit together)."""
        return LeaseTerms(lease_s=self.leader_lease_s, renew_s=self.leader_renew_s)

    def keys(self) -> dict[KeyScope, str]:
        """The keys given at start, by scope."""
        given = {KeyScope.INFER: self.api_key, KeyScope.ADMIN: self.admin_key}
        return {scope: key.get_secret_value() for scope, key in given.items() if key is not None}

    def tuning(self) -> Tuning:
        """The policies' timing, as configured."""
        return Tuning(heartbeat_s=self.heartbeat_s, missed_beats=self.missed_heartbeats)
