"""What this host offers: CPUs, memory, accelerator memory, execution providers."""

from __future__ import annotations

import os
import socket
from pathlib import Path

import msgspec
import onnxruntime as ort

from nrt.inference import select_providers


class HostResources(msgspec.Struct, frozen=True, kw_only=True):
    host: str
    cpu_count: int
    ram_bytes: int
    accelerator_bytes: int
    providers: tuple[str, ...]


def _gpu_memory_bytes() -> int:
    """Total memory of the first NVIDIA GPU, when onnxruntime-gpu can use one; else 0."""
    if "CUDAExecutionProvider" not in ort.get_available_providers():
        return 0
    try:
        import ctypes

        cuda = ctypes.CDLL("libcudart.so")
        free, total = ctypes.c_size_t(), ctypes.c_size_t()
        if cuda.cudaMemGetInfo(ctypes.byref(free), ctypes.byref(total)) == 0:
            return int(total.value)
    except OSError:
        pass
    return 0


def detect(ram_limit: int | None = None) -> HostResources:
    """This host; ``ram_limit`` (NRT_WORKER_RAM) caps what the worker offers for models."""
    total_ram = os.sysconf("SC_PAGE_SIZE") * os.sysconf("SC_PHYS_PAGES")
    return HostResources(
        host=socket.gethostname(),
        cpu_count=os.cpu_count() or 1,
        ram_bytes=min(total_ram, ram_limit) if ram_limit else total_ram,
        accelerator_bytes=_gpu_memory_bytes(),
        providers=tuple(select_providers()),
    )


def resident_set_bytes() -> int:
    """This process's resident memory, from /proc (0 where there is no /proc)."""
    try:
        pages = int(Path("/proc/self/statm").read_text().split()[1])
    except (OSError, IndexError, ValueError):
        return 0
    return pages * os.sysconf("SC_PAGE_SIZE")
