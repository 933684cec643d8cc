"""specialist_worker: hosts models and serves inference on their subjects."""

from __future__ import annotations

import os

from nrt.service import ServiceContext
from nrt.units import parse_size
from specialist_worker.resources import detect
from specialist_worker.worker import Worker


async def run(ctx: ServiceContext) -> None:
    ram_limit = os.environ.get("NRT_WORKER_RAM")
    worker = Worker(
        ctx.broker,
        detect(parse_size(ram_limit) if ram_limit else None),
        worker_id=os.environ.get("NRT_WORKER_ID") or None,
        max_batch_size=int(os.environ.get("NRT_WORKER_MAX_BATCH", "16")),
        heartbeat_s=float(os.environ.get("NRT_HEARTBEAT_S", "2")),
        ort_spin=os.environ.get("NRT_WORKER_ORT_SPIN", "0") == "1",
    )
    await worker.start()
    try:
        await worker.run_heartbeats(ctx.stopping)
    finally:
        await worker.stop()
