"""What this host offers: CPUs, memory, its device (a GPU's memory), execution providers."""

from __future__ import annotations

import os
import socket

import msgspec

from nrt.adapters.inference.weights import CPU, CUDA
from nrt.core.device import Device
from nrt.core.vocabulary import DeviceKind
from nrt.hosting.device_memory import DeviceMemory, detect_memory, total_ram_bytes


class HostResources(msgspec.Struct, frozen=True, kw_only=True):
    host: str
    cpu_count: int
    ram_bytes: int  # the memory offered for models (standby, and residents on a CPU host)
    accelerator_bytes: int  # the GPU's memory; 0: no GPU
    providers: tuple[str, ...]  # the execution providers its sessions are built with, best first
    device: Device  # what it runs models on


def detect(ram_limit: int | None = None, memory: DeviceMemory | None = None) -> HostResources:
    """This host; ``ram_limit`` (NRT_WORKER_RAM) caps what the worker offers for models; ``memory``
    is its device's measurement (:func:`detect_memory` by default)."""
    total_ram = total_ram_bytes()
    device = (memory if memory is not None else detect_memory()).device
    gpu = device.kind is DeviceKind.CUDA
    return HostResources(
        host=socket.gethostname(),
        cpu_count=os.cpu_count() or 1,
        ram_bytes=min(total_ram, ram_limit) if ram_limit else total_ram,
        accelerator_bytes=device.total_bytes if gpu else 0,
        providers=(CUDA, CPU) if gpu else (CPU,),
        device=device,
    )
