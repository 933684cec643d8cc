"""cluster_state: records the event stream in PostgreSQL and runs the policies that the log drives."""

from __future__ import annotations

import os
from pathlib import Path

from cluster_state.service import ClusterStateService, ConfigurationError, tuning_from_env
from nrt.service import ServiceContext

MANIFEST_ENV = "NRT_MANIFEST"


def bootstrap_manifest(path: str | None) -> tuple[str | None, str]:
    """The bootstrap manifest's text and where it came from (``--manifest``, else NRT_MANIFEST)."""
    chosen = path or os.environ.get(MANIFEST_ENV) or None
    if chosen is None:
        return None, "no manifest"
    try:
        return Path(chosen).read_text(encoding="utf-8"), chosen
    except OSError as exc:
        raise ConfigurationError(f"cannot read the manifest {chosen}: {exc.strerror}") from None


async def run(ctx: ServiceContext, manifest: str | None = None) -> None:
    if not ctx.settings.database_url:
        raise ConfigurationError(
            "cluster_state needs NRT_DATABASE_URL (e.g. postgresql://user@127.0.0.1:5432/nrt): "
            "it records the event log in PostgreSQL"
        )
    text, source = bootstrap_manifest(manifest)
    service = ClusterStateService(
        ctx.broker,
        ctx.settings.database_url,
        manifest_text=text,
        manifest_file=source,
        tuning=tuning_from_env(dict(os.environ)),
    )
    await service.run(ctx.stopping)
