"""Device memory, measured: the host's RAM here (the GPU's, through NVML, in ``test_gpu.py``), which
device a worker picks, and what a resident is charged on each kind of device."""

from __future__ import annotations

import logging
import mmap
from pathlib import Path
from types import ModuleType

import pytest

from nrt.adapters.inference import ArtifactRegistry
from nrt.core.device import Device
from nrt.core.vocabulary import DeviceKind, Tier
from nrt.hosting.device_memory import (
    NO_CUDA_PROVIDER,
    HostMemory,
    NvmlUnavailable,
    cuda_unavailable,
    detect_memory,
    memory_of,
    total_ram_bytes,
)
from nrt.hosting.model_host import ModelHost
from nrt.hosting.model_sources import LocalArtifact, resolve
from nrt.hosting.resources import detect

MB = 1 << 20
CPU_ONLY = ["CPUExecutionProvider"]
WITH_CUDA = ["CUDAExecutionProvider", "CPUExecutionProvider"]


def test_host_memory_names_the_cpu_and_measures_this_process() -> None:
    memory = HostMemory()
    device = memory.device
    assert (device.kind, device.id) == (DeviceKind.CPU, "cpu")
    assert device.name  # the CPU's model name
    assert device.total_bytes == total_ram_bytes() > 0
    assert 0 < memory.free_bytes() <= device.total_bytes
    before = memory.used_bytes()
    # 256 MB mapped straight from the kernel, every page written: unmapping returns it at once,
    # whatever malloc's thresholds earlier tests in this process left (a freed numpy array may stay
    # in the heap and keep the resident set up)
    block = mmap.mmap(-1, 256 * MB)
    block.write(b"\x01" * (256 * MB))
    held = memory.used_bytes()
    assert held - before >= 200 * MB
    block.close()
    assert memory.used_bytes() < held - 100 * MB  # freed: the resident set shrinks again


def test_a_host_without_the_cuda_provider_runs_on_its_cpu() -> None:
    assert isinstance(detect_memory(CPU_ONLY), HostMemory)
    resources = detect(memory=HostMemory())
    assert resources.device.kind is DeviceKind.CPU
    assert (resources.accelerator_bytes, resources.providers) == (0, ("CPUExecutionProvider",))
    assert isinstance(memory_of(resources.device), HostMemory)


def test_onnxruntime_gpu_without_nvidia_ml_py_is_a_clear_error() -> None:
    def missing() -> ModuleType:
        raise ModuleNotFoundError("No module named 'pynvml'")

    with pytest.raises(RuntimeError, match=r"nvidia-ml-py is not installed.*NRT_GPU=1 scripts/bootstrap"):
        detect_memory(WITH_CUDA, nvml=missing)


def test_onnxruntime_gpu_where_nvml_finds_no_gpu_runs_on_the_cpu(caplog: pytest.LogCaptureFixture) -> None:
    def no_driver() -> ModuleType:
        raise NvmlUnavailable("NVML did not start: NVML Shared Library Not Found")

    with caplog.at_level(logging.WARNING, logger="nrt.worker"):
        memory = detect_memory(WITH_CUDA, nvml=no_driver)
    assert isinstance(memory, HostMemory)
    assert "no GPU is usable (NVML did not start: NVML Shared Library Not Found)" in caplog.text


def test_without_the_cuda_provider_gpu_tests_are_skipped_with_the_reason() -> None:
    import onnxruntime as ort

    if "CUDAExecutionProvider" in ort.get_available_providers():
        pytest.skip("onnxruntime-gpu is installed here: the reason is the one for a host without it")
    assert cuda_unavailable() == NO_CUDA_PROVIDER == "no CUDA device: CUDAExecutionProvider not available"


class SteppedDevice:
    """A device of ``kind`` whose memory in use grows by ``step`` bytes at each reading."""

    def __init__(self, kind: DeviceKind, step: int) -> None:
        self.device = Device(kind=kind, id="d0", name="stepped", total_bytes=1 << 40)
        self.step, self.reading = step, 0

    def used_bytes(self) -> int:
        self.reading += self.step
        return self.reading

    def free_bytes(self) -> int:
        return self.device.total_bytes - self.reading


def test_a_resident_on_the_cpu_is_charged_its_weights_and_the_ram_its_session_took(nrt_home: Path) -> None:
    memory = SteppedDevice(DeviceKind.CPU, step=7 * MB)  # the build of a session reads it twice: 7 MB between
    host = ModelHost(ArtifactRegistry(CPU_ONLY), memory=memory)
    try:
        artifact = resolve("catalogue://tiny-llama")
        assert isinstance(artifact, LocalArtifact)
        standby = host.load("m", "catalogue://tiny-llama", artifact)
        weights = host.registry.weights("m").nbytes
        assert (standby.to_tier, standby.bytes_held) == (Tier.STANDBY, weights)
        resident = host.promote("m")
        assert (resident.to_tier, resident.bytes_held) == (Tier.RESIDENT, weights + 7 * MB)
        assert host.demote("m").bytes_held == weights
    finally:
        host.close()


def test_a_session_onnxruntime_kept_off_the_gpu_is_measured_in_ram(
    nrt_home: Path, caplog: pytest.LogCaptureFixture
) -> None:
    """A GPU worker whose session ends up on the CPU provider charges the RAM it took, not GPU bytes."""
    gpu = SteppedDevice(DeviceKind.CUDA, step=7 * MB)
    host = ModelHost(ArtifactRegistry(CPU_ONLY), memory=gpu)
    try:
        artifact = resolve("catalogue://tiny-llama")
        assert isinstance(artifact, LocalArtifact)
        host.load("m", "catalogue://tiny-llama", artifact)
        weights = host.registry.weights("m").nbytes
        with caplog.at_level(logging.WARNING, logger="nrt.worker"):
            resident = host.promote("m")
        assert "m: ONNX Runtime built its session on CPUExecutionProvider, not the GPU" in caplog.text
        assert resident.bytes_held == host.bytes_held("m") >= weights  # its weights and its session's RAM
    finally:
        host.close()
