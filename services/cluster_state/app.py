"""cluster_state: records the event stream in PostgreSQL and runs the policies that the log drives."""

from __future__ import annotations

from pathlib import Path

from cluster_state.service import ClusterStateService, ConfigurationError
from cluster_state.settings import ClusterStateSettings
from nrt.adapters.bus.jetstream import StreamLimits
from nrt.adapters.settings import env_name
from nrt.core.eventlog import LeaseError
from nrt.entrypoints.service import ServiceContext

MANIFEST_ENV = env_name(ClusterStateSettings, "manifest")


def bootstrap_manifest(path: Path | None) -> tuple[str | None, str]:
    """The bootstrap manifest's text and where it came from (``--manifest``, else NRT_MANIFEST)."""
    if path is None:
        return None, "no manifest"
    try:
        return path.read_text(encoding="utf-8"), str(path)
    except OSError as exc:
        raise ConfigurationError(f"cannot read the manifest {path}: {exc.strerror}") from None


async def run(ctx: ServiceContext, manifest: str | None = None, settings: ClusterStateSettings | None = None) -> None:
    settings = settings or ClusterStateSettings.from_env()
    if not settings.database_url:
        raise ConfigurationError(
            "cluster_state needs NRT_DATABASE_URL (e.g. postgresql://user@127.0.0.1:5432/nrt): "
            "it records the event log in PostgreSQL"
        )
    text, source = bootstrap_manifest(Path(manifest) if manifest else settings.manifest)
    try:
        lease = settings.lease()
    except LeaseError as exc:
        raise ConfigurationError(
            f"{exc} ({env_name(ClusterStateSettings, 'leader_lease_s')}, "
            f"{env_name(ClusterStateSettings, 'leader_renew_s')})"
        ) from None
    service = ClusterStateService(
        ctx.broker,
        settings.database_url,
        manifest_text=text,
        manifest_file=source,
        tuning=settings.tuning(),
        keys=settings.keys(),
        registry=ctx.registry,
        snapshot_every_events=settings.snapshot_every_events,
        snapshot_every_s=settings.snapshot_every_s,
        stream_limits=StreamLimits.of(settings),
        lease=lease,
        holder=ctx.instance,
        stream_replicas=settings.nats_replicas,
    )
    ctx.counters["events_rejected"] = lambda: service.recorder.rejected
    ctx.counters["events_lost"] = lambda: service.recorder.lost  # dropped by the stream's limits before recorded
    ctx.counters["leader_epoch"] = service.leadership.epoch  # the epoch this instance leads (0: a standby)
    await service.run(ctx.stopping)
