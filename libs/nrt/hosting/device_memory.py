"""What a worker's models hold in memory on its device, measured: the host's RAM, or an NVIDIA GPU's.

A :class:`DeviceMemory` names its device and measures two things: the bytes in use (the worker
reads it before and after building a session: the difference is what the resident model holds)
and the bytes free now (reported in each heartbeat).

- :class:`HostMemory` (CPU): this process's resident set, and the RAM the kernel says is available.
- :class:`CudaMemory` (GPU): memory in use and free on the GPU, from NVML (``nvidia-ml-py``, the
  ``gpu`` extra). NVML counts the whole device, so the measurement is the worker's own where
  the worker has the GPU to itself (as the compose profile ``gpu`` reserves one per worker).

:func:`detect_memory` picks the GPU when ONNX Runtime offers the CUDA execution provider
(onnxruntime-gpu) and NVML finds a GPU, else the host.
"""

from __future__ import annotations

import functools
import logging
import os
import platform
from collections.abc import Callable, Sequence
from pathlib import Path
from types import ModuleType
from typing import Protocol

import onnxruntime as ort

from nrt.adapters.inference.weights import CUDA
from nrt.core.device import Device
from nrt.core.vocabulary import DeviceKind

log = logging.getLogger("nrt.worker")

NO_CUDA_PROVIDER = "no CUDA device: CUDAExecutionProvider not available"


class DeviceMemory(Protocol):
    @property
    def device(self) -> Device: ...

    def used_bytes(self) -> int:
        """Bytes in use on the device now (what a session's build adds is the model's)."""
        ...

    def free_bytes(self) -> int:
        """Bytes free on the device now."""
        ...


# -- the host ---------------------------------------------------------------------------------


def resident_set_bytes() -> int:
    """This process's resident memory, from /proc (0 where there is no /proc)."""
    try:
        pages = int(Path("/proc/self/statm").read_text().split()[1])
    except (OSError, IndexError, ValueError):
        return 0
    return pages * os.sysconf("SC_PAGE_SIZE")


def total_ram_bytes() -> int:
    return os.sysconf("SC_PAGE_SIZE") * os.sysconf("SC_PHYS_PAGES")


def available_ram_bytes() -> int:
    """``MemAvailable`` from /proc/meminfo (RAM the kernel can give without swapping); else the free pages."""
    try:
        for line in Path("/proc/meminfo").read_text().splitlines():
            if line.startswith("MemAvailable:"):
                return int(line.split()[1]) * 1024
    except (OSError, IndexError, ValueError):
        pass
    return os.sysconf("SC_PAGE_SIZE") * os.sysconf("SC_AVPHYS_PAGES")


@functools.cache
def cpu_name() -> str:
    """The CPU's model name (/proc/cpuinfo, read once a process), else what the platform says."""
    try:
        for line in Path("/proc/cpuinfo").read_text().splitlines():
            if line.startswith("model name"):
                return line.split(":", 1)[1].strip()
    except OSError:
        pass
    return platform.processor() or platform.machine()


class HostMemory:
    """The host's RAM: this process's resident set in use, and the RAM available."""

    def __init__(self) -> None:
        self._device = Device(kind=DeviceKind.CPU, id="cpu", name=cpu_name(), total_bytes=total_ram_bytes())

    @property
    def device(self) -> Device:
        return self._device

    def used_bytes(self) -> int:
        return resident_set_bytes()

    def free_bytes(self) -> int:
        return available_ram_bytes()


# -- an NVIDIA GPU --------------------------------------------------------------------------------


class NvmlUnavailable(RuntimeError):
    """NVML cannot be used here (no driver, or no GPU); the message says why."""


def load_nvml() -> ModuleType:
    """``pynvml`` from nvidia-ml-py, initialised. ImportError when nvidia-ml-py is not installed;
    :class:`NvmlUnavailable` when NVML does not start (no NVIDIA driver) or sees no GPU."""
    import pynvml

    try:
        pynvml.nvmlInit()
        count = int(pynvml.nvmlDeviceGetCount())
    except pynvml.NVMLError as exc:
        raise NvmlUnavailable(f"NVML did not start: {exc}") from exc
    if count == 0:
        raise NvmlUnavailable("NVML found no GPU")
    module: ModuleType = pynvml
    return module


def _text(value: str | bytes) -> str:
    return value.decode() if isinstance(value, bytes) else value


def visible_gpu() -> str | None:
    """The GPU ONNX Runtime uses (CUDA's device 0): the first entry of ``CUDA_VISIBLE_DEVICES``, if set."""
    visible = os.environ.get("CUDA_VISIBLE_DEVICES", "").split(",")[0].strip()
    return visible or None


class CudaMemory:
    """One NVIDIA GPU through NVML: the memory in use on it and free."""

    def __init__(self, nvml: ModuleType, handle: object) -> None:
        self._nvml = nvml
        self._handle = handle
        info = nvml.nvmlDeviceGetMemoryInfo(handle)
        self._device = Device(
            kind=DeviceKind.CUDA,
            id=_text(nvml.nvmlDeviceGetUUID(handle)),
            name=_text(nvml.nvmlDeviceGetName(handle)),
            total_bytes=int(info.total),
        )

    @classmethod
    def open(cls, gpu: str | None = None, nvml: Callable[[], ModuleType] = load_nvml) -> CudaMemory:
        """The GPU ``gpu`` names (an index, or a UUID ``GPU-…``); the first visible one when None."""
        module = nvml()
        chosen = gpu if gpu is not None else visible_gpu()
        if chosen is not None and chosen.startswith("GPU-"):
            handle = module.nvmlDeviceGetHandleByUUID(chosen)
        else:
            index = int(chosen) if chosen is not None and chosen.isdigit() else 0
            handle = module.nvmlDeviceGetHandleByIndex(index)
        return cls(module, handle)

    @property
    def device(self) -> Device:
        return self._device

    def used_bytes(self) -> int:
        return int(self._nvml.nvmlDeviceGetMemoryInfo(self._handle).used)

    def free_bytes(self) -> int:
        return int(self._nvml.nvmlDeviceGetMemoryInfo(self._handle).free)


# -- which one ------------------------------------------------------------------------------------


def detect_memory(available: Sequence[str] | None = None, nvml: Callable[[], ModuleType] = load_nvml) -> DeviceMemory:
    """The GPU when ONNX Runtime offers CUDA (``available``: its providers) and NVML finds one, else the host.

    onnxruntime-gpu without nvidia-ml-py is a broken install (the ``gpu`` extra brings both): a clear
    error. onnxruntime-gpu on a host where NVML finds no GPU runs on the CPU, with a warning.
    """
    offered = ort.get_available_providers() if available is None else available
    if CUDA not in offered:
        return HostMemory()
    try:
        return CudaMemory.open(nvml=nvml)
    except ImportError as exc:
        raise RuntimeError(
            "onnxruntime-gpu offers the CUDAExecutionProvider but nvidia-ml-py is not installed: the worker "
            "measures GPU memory with it. Install the gpu extra (NRT_GPU=1 scripts/bootstrap)"
        ) from exc
    except NvmlUnavailable as exc:
        log.warning("onnxruntime-gpu is installed but no GPU is usable (%s): models run on the CPU", exc)
        return HostMemory()


def memory_of(device: Device, nvml: Callable[[], ModuleType] = load_nvml) -> DeviceMemory:
    """The measurement of a device :func:`detect_memory` found (a worker is handed its resources' device)."""
    if device.kind is DeviceKind.CUDA:
        return CudaMemory.open(device.id or None, nvml=nvml)
    return HostMemory()


def cuda_unavailable() -> str | None:
    """Why there is no CUDA device to run on here (None: there is one). The reason a ``gpu`` test is skipped with."""
    if CUDA not in ort.get_available_providers():
        return NO_CUDA_PROVIDER
    try:
        load_nvml()
    except ImportError:
        return "no CUDA device: CUDAExecutionProvider is available but nvidia-ml-py is not installed"
    except NvmlUnavailable as exc:
        return f"no CUDA device: CUDAExecutionProvider is available but {exc}"
    return None
