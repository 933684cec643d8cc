"""The device a worker runs its models on. A light module (msgspec only): the events, the wire
messages and the folded state carry it.

A worker records its device when it joins (``WorkerJoined``) and reports it, with the memory
free on it now, in every heartbeat. Its ``total_bytes`` is the GPU's memory for a CUDA device
(then also the worker's ``accelerator_bytes``), or the host's RAM for the CPU.
"""

from __future__ import annotations

import msgspec

from nrt.core.vocabulary import DeviceKind


class Device(msgspec.Struct, frozen=True, kw_only=True):
    kind: DeviceKind
    id: str  # a GPU's UUID (GPU-…); "cpu" for the host's processors; "" when not known
    name: str  # e.g. "NVIDIA H100 80GB HBM3", or the CPU's model name; "" when not known
    total_bytes: int  # the device's memory: the GPU's, or the host's RAM
