"""specialist_worker: hosts models and serves inference on their subjects."""

from __future__ import annotations

from nrt.entrypoints.service import ServiceContext
from nrt.hosting.resources import detect
from nrt.hosting.worker import Worker
from specialist_worker.settings import WorkerSettings


async def run(ctx: ServiceContext, settings: WorkerSettings | None = None) -> None:
    settings = settings or WorkerSettings.from_env()
    worker = Worker(
        ctx.broker,
        detect(settings.worker_ram),
        worker_id=settings.worker_id,
        max_batch_size=settings.worker_max_batch,
        prefix_cache_bytes=settings.worker_prefix_cache,
        max_queue=settings.worker_max_queue,
        heartbeat_s=settings.heartbeat_s,
        ort_threads=settings.worker_ort_threads,
        ort_spin=settings.worker_ort_spin,
        remote=settings.remote_policy(),
        registry=ctx.registry,
        share_artifacts=settings.worker_share_artifacts,
        nats_replicas=settings.nats_replicas,
    )
    await worker.start()
    try:
        await worker.run_heartbeats(ctx.stopping)
    finally:
        await worker.stop()
