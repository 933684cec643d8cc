"""Prepared models over the bus: from a worker's join to its first token of a model, converted on the host
vs fetched from the cluster's artifact store (``NRT_ARTIFACTS``) that the first host filled, in one run.

A random Llama checkpoint of ``--mb`` megabytes of fp32 weights (the heavy tests' kind:
``nrt.testing.hf_checkpoints``) is put in a Hugging Face cache and declared as ``hf://acme/big`` with
``quantization: none``, so the artifact served is as large as the checkpoint. Two "hosts" run one after
the other in this process, each with its own NRT_HOME, on one embedded nats-server:

1. host A has the checkpoint in its Hugging Face cache: its worker joins, is told to load the model,
   prepares it (export to ONNX, check against PyTorch), serves a token; then it publishes the artifact
   (in the background; timed to its end);
2. host B has an empty Hugging Face cache and no Hub: its worker joins, fetches the artifact, verifies every
   file's sha256, installs it and serves a token.

The ratio is converted / fetched (higher: fetching saves more). Both hosts share this machine's cores,
disk and a loopback NATS connection: a fetch between machines moves at the network's speed instead.

    python -m bench.artifacts [--mb 500]
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import logging
import os
import shutil
import tempfile
import time
from collections.abc import AsyncIterator
from dataclasses import dataclass
from pathlib import Path

from faststream.nats import NatsBroker
from nats.aio.client import Client
from nats.js.errors import NotFoundError

from bench.common import report
from nrt.adapters.bus import rpc, subjects
from nrt.adapters.bus.broker import start_broker
from nrt.adapters.bus.connection import connect
from nrt.adapters.bus.jetstream import ARTIFACTS_STREAM, EventPublisher, ensure_events_stream
from nrt.core.events import ManifestApplied, TierChanged, Weights, decode
from nrt.core.manifest import parse_manifest
from nrt.core.protocol import ControlCommand, ControlReply, GenerateChunk, GenerateRequest, SamplingParams
from nrt.core.vocabulary import Reason, Tier
from nrt.hosting.artifact_share import Transfer
from nrt.hosting.resources import detect
from nrt.hosting.worker import Worker
from nrt.testing.hf_checkpoints import put_in_cache, save_checkpoint
from nrt.testing.servers import nats_server

MODEL = "big"
SOURCE = "hf://acme/big"
PARAMS_PER_LAYER_AT_1024 = 15_204_352  # hidden 1024, intermediate 4096, 16 heads of 64, 4 key/value heads
MANIFEST = f"""cluster: bench-artifacts
resources:
  gpu_budget: 8GB
  ram_budget: 8GB
models:
  router:
    source: catalogue://tiny-llama
    tier: standby
  specialists:
    - id: {MODEL}
      source: {SOURCE}
      tier: resident
      quantization: none
routing:
  entry: router
  dispatch_rule: router.output.intent -> specialists.{MODEL}
"""


def config_for(megabytes: int) -> dict[str, int]:
    """A Llama config whose fp32 weights are about ``megabytes`` (layers of hidden size 1024, at least one)."""
    layers = max(1, round(megabytes * 1e6 / 4 / PARAMS_PER_LAYER_AT_1024))
    return {
        "hidden_size": 1024,
        "intermediate_size": 4096,
        "num_hidden_layers": layers,
        "num_attention_heads": 16,
        "num_key_value_heads": 4,
    }


def as_host(home: Path, hf_cache: Path) -> None:
    """Make this process a host with ``home`` as NRT_HOME and ``hf_cache`` as its offline Hugging Face cache."""
    from huggingface_hub import constants

    (home / "models").mkdir(parents=True, exist_ok=True)
    hf_cache.mkdir(parents=True, exist_ok=True)
    os.environ["NRT_HOME"] = str(home)
    constants.HF_HUB_CACHE = str(hf_cache)
    constants.HF_HUB_OFFLINE = True


@contextlib.asynccontextmanager
async def joined(broker: NatsBroker, worker_id: str) -> AsyncIterator[Worker]:
    worker = Worker(broker, detect(), worker_id=worker_id, max_batch_size=1)
    await worker.start()
    try:
        yield worker
    finally:
        await worker.stop()


@dataclass(frozen=True)
class Host:
    """One host's figures, in seconds from its worker's join."""

    first_token: float
    load: float  # the load command's reply (resolve: prepare or fetch; then weights in RAM and the session)
    uploads_after: float  # its uploads still running once it served
    transfers: tuple[Transfer, ...]

    def moved(self, direction: str) -> Transfer:
        return next(t for t in self.transfers if t.direction == direction)


async def join_to_first_token(nc: Client, broker: NatsBroker, worker_id: str) -> Host:
    """A new worker's join to its first token of the model, and what it moved over the bus."""
    async with joined(broker, worker_id) as worker:
        started = time.perf_counter()
        command = ControlCommand(
            action="load", model_id=MODEL, source=SOURCE, tier=Tier.RESIDENT, reason=Reason.COMMAND
        )
        await rpc.request(nc, subjects.control(worker_id), command, ControlReply, timeout=3600)
        loaded = time.perf_counter() - started
        request = GenerateRequest(
            request_id=f"bench-{worker_id}",
            model_id=MODEL,
            manifest_version=1,
            prompt="The quick brown fox",
            params=SamplingParams(max_tokens=1, temperature=0.0),
        )
        first_token = 0.0
        async for chunk in rpc.stream(nc, subjects.infer(MODEL), request, GenerateChunk, 600, 600):
            if chunk.token_ids and not first_token:
                first_token = time.perf_counter() - started
        if worker.artifacts is not None:
            await worker.artifacts.settle()  # host A: the upload it began once it had prepared the model
        uploads = time.perf_counter() - started - first_token
        transfers = tuple(worker.artifacts.transfers) if worker.artifacts is not None else ()
    return Host(first_token, loaded, uploads, transfers)


async def weights_of(nc: Client, worker_id: str) -> Weights:
    js = nc.jetstream()
    info = await js.stream_info(subjects.EVENTS_STREAM)
    for seq in range(info.state.first_seq, info.state.last_seq + 1):
        event = decode((await js.get_msg(subjects.EVENTS_STREAM, seq)).data or b"")
        if isinstance(event, TierChanged) and event.worker_id == worker_id and event.weights is not None:
            return event.weights
    raise SystemExit(f"worker {worker_id} recorded no weights: its load did not happen")


async def main(megabytes: int) -> None:
    with tempfile.TemporaryDirectory(prefix="nrt-bench-artifacts-") as scratch:
        root = Path(scratch)
        print(f"building a random Llama of about {megabytes} MB of fp32 weights...", flush=True)
        checkpoint = save_checkpoint(root / "checkpoint", "llama", seed=5, config=config_for(megabytes))
        weight_bytes = sum(p.stat().st_size for p in checkpoint.glob("*.safetensors"))
        put_in_cache(root / "host-a-hf", "acme/big", checkpoint)
        with nats_server(root / "nats", env_var=None, use_docker=False) as url:
            nc = await connect(url, "bench-artifacts")
            js = nc.jetstream()
            await ensure_events_stream(js)
            with contextlib.suppress(NotFoundError):
                await js.delete_stream(ARTIFACTS_STREAM)
            manifest = parse_manifest(MANIFEST, "bench.yaml")
            applied = ManifestApplied(version=1, cluster=manifest.cluster, digest=manifest.digest, text=manifest.text)
            await EventPublisher(nc).publish(applied)
            broker = await start_broker(url, "bench-artifacts-worker")
            try:
                as_host(root / "host-a", root / "host-a-hf")
                host_a = await join_to_first_token(nc, broker, "host-a")
                shutil.rmtree(root / "host-a", ignore_errors=True)  # its disk back before host B fills its own
                as_host(root / "host-b", root / "host-b-hf")
                host_b = await join_to_first_token(nc, broker, "host-b")
                prepared_weights, fetched_weights = await weights_of(nc, "host-a"), await weights_of(nc, "host-b")
            finally:
                await broker.stop()
                await nc.drain()
    if (prepared_weights.origin, fetched_weights.origin) != ("prepared", "fetched"):
        raise SystemExit(f"expected prepared then fetched, got {prepared_weights.origin}, {fetched_weights.origin}")
    if prepared_weights.sha256 != fetched_weights.sha256:
        raise SystemExit("host B serves other weights than host A prepared")
    size_mb = fetched_weights.bytes / 1e6
    print(f"checkpoint {weight_bytes / 1e6:,.0f} MB of fp32 weights; artifact served {size_mb:,.0f} MB (fp32 ONNX)")
    upload, fetch = host_a.moved("published"), host_b.moved("fetched")
    report("host A: load (prepare, weights in RAM, session)", host_a.load, "s", precision=1)
    report("host A: upload to the bus", upload.seconds, "s", precision=1)
    report("host A: upload rate", upload.bytes / 1e6 / upload.seconds, "MB/s", precision=0)
    report("host A: upload still running once it served", host_a.uploads_after, "s", precision=1)
    report("host B: fetch, verify, install", fetch.seconds, "s", precision=1)
    report("host B: fetch rate", fetch.bytes / 1e6 / fetch.seconds, "MB/s", precision=0)
    report("host B: load (fetch, weights in RAM, session)", host_b.load, "s", precision=1)
    report("host A: join to first token, converted", host_a.first_token, "s", precision=1)
    report(
        "host B: join to first token, fetched",
        host_b.first_token,
        "s",
        host_a.first_token / host_b.first_token,
        "converted locally (higher is better)",
        precision=1,
    )


if __name__ == "__main__":
    logging.basicConfig(level=logging.WARNING, format="%(message)s")
    logging.getLogger("nrt.worker").setLevel(logging.INFO)  # what was fetched or published, and how fast
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--mb", type=int, default=500, help="the checkpoint's fp32 weights, in megabytes")
    args = parser.parse_args()
    asyncio.run(main(args.mb))
