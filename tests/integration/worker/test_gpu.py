"""On a CUDA device: the worker finds its GPU, builds sessions with the CUDA execution provider, and
measures its tier transitions in device bytes (NVML). Skipped, with the reason, without one."""

from __future__ import annotations

import gc
from pathlib import Path

import pytest
from nats.aio.client import Client

from nrt.adapters.inference import ArtifactRegistry
from nrt.core.events import TierChanged
from nrt.core.vocabulary import DeviceKind, Tier
from nrt.hosting.device_memory import CudaMemory, detect_memory
from nrt.hosting.model_host import ModelHost
from nrt.hosting.model_sources import LocalArtifact, resolve
from nrt.hosting.resources import detect
from nrt.hosting.worker import Worker
from worker_calls import control, events, generate

pytestmark = pytest.mark.gpu

LLAMA = "catalogue://tiny-llama"
CUDA = "CUDAExecutionProvider"


def test_the_worker_detects_its_gpu() -> None:
    memory = detect_memory()
    assert isinstance(memory, CudaMemory)
    resources = detect(memory=memory)
    device = resources.device
    assert device.kind is DeviceKind.CUDA
    assert device.id.startswith("GPU-")  # its UUID, as NVML names it
    assert device.name  # e.g. "NVIDIA H100 80GB HBM3"
    assert resources.accelerator_bytes == device.total_bytes > 0
    assert resources.providers == (CUDA, "CPUExecutionProvider")
    assert 0 < memory.free_bytes() <= device.total_bytes
    assert 0 < memory.used_bytes() <= device.total_bytes


async def test_the_worker_builds_its_sessions_with_the_cuda_provider(nc: Client, worker: Worker) -> None:
    assert worker.host.memory.device.kind is DeviceKind.CUDA
    reply = await control(nc, worker, action="load", model_id="m", source=LLAMA, tier="resident")
    assert reply.tier == "resident"
    [usage] = worker.host.registry.usage()
    assert (usage.has_session, usage.provider) == (True, CUDA)  # the provider ONNX Runtime kept, not a CPU fallback
    chunks = await generate(nc, "m", "The quick brown fox", max_tokens=8)
    assert chunks[-1].finish_reason in ("stop", "length")
    tiers = [e for e in await events(nc, 3) if isinstance(e, TierChanged)]
    assert [(e.from_tier, e.to_tier) for e in tiers] == [("unloaded", "standby"), ("standby", "resident")]
    assert tiers[-1].bytes_held == reply.bytes_held > 0  # the device bytes its session holds


def test_tier_transitions_are_measured_in_device_bytes(nrt_home: Path) -> None:
    memory = CudaMemory.open()
    host = ModelHost(ArtifactRegistry([CUDA, "CPUExecutionProvider"]), memory=memory)
    artifact = resolve(LLAMA)
    assert isinstance(artifact, LocalArtifact)
    try:
        standby = host.load("m", LLAMA, artifact)
        assert (standby.to_tier, standby.bytes_held) == (Tier.STANDBY, host.registry.weights("m").nbytes)
        # a first session brings up the CUDA context; the measured cycle is the second one
        host.promote("m")
        host.demote("m")
        gc.collect()

        before = memory.used_bytes()
        resident = host.promote("m")
        held = memory.used_bytes()
        assert resident.to_tier is Tier.RESIDENT
        assert held > before  # standby -> resident raises the device bytes in use
        assert resident.bytes_held == host.bytes_held("m") > 0  # charged what its session took on the device
        assert resident.bytes_held <= held - before + (64 << 20)  # within NVML's reading of the same build

        demoted = host.demote("m")
        gc.collect()
        assert demoted.to_tier is Tier.STANDBY
        assert memory.used_bytes() < held  # eviction gives the session's device memory back
        assert demoted.bytes_held == host.registry.weights("m").nbytes  # standby: the weights in RAM again
    finally:
        host.close()
