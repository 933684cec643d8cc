"""The cluster's vocabulary: one type per concept, shared by the manifest, the events, the wire
messages, the fold, the policies and the engine.

Each is a ``StrEnum`` whose values are the strings the log and the wire always carried, so
encoding is unchanged and every stored event still decodes. A value is never renamed: a new
one may be added; an old one stays for the rows that hold it.
"""

from __future__ import annotations

from collections.abc import Mapping
from enum import StrEnum
from typing import Literal


class Tier(StrEnum):
    """Where a model is held on a worker (and the tier a manifest declares for it)."""

    RESIDENT = "resident"  # a live inference session, ready to serve
    STANDBY = "standby"  # weights held in RAM, no session
    REMOTE = "remote"  # served by an external OpenAI-compatible endpoint
    UNLOADED = "unloaded"  # nothing held (never declared in a manifest; a state only)


TIER_RANK: Mapping[Tier, int] = {Tier.UNLOADED: 0, Tier.REMOTE: 1, Tier.STANDBY: 2, Tier.RESIDENT: 3}
"""How ready a tier is: a change to a higher rank is a promotion, to a lower one a demotion."""


class Priority(StrEnum):
    """How much a model matters under budget pressure."""

    CRITICAL = "critical"  # never evicted under budget pressure
    HIGH = "high"
    NORMAL = "normal"
    LOW = "low"


class Reason(StrEnum):
    """Why a change happened: what a control command carries to the event it causes, and the
    ``reason`` of ``TierChanged``, ``SessionKvEvicted``, ``PrefixKvEvicted``, ``SessionClosed`` and ``WorkerLost``."""

    # a model's tier
    PLACEMENT = "placement"  # placed on a worker at its declared tier
    CO_ACTIVATION = "co_activation"  # the model it co-activates on fired
    PROMOTION_HINT = "promotion_hint"  # the router classified a request for it (on_router_classification)
    ON_DEMAND = "on_demand"  # a request waited for it
    BUDGET_PRESSURE = "budget_pressure"  # demoted to make room for another model
    MANIFEST_SWAP = "manifest_swap"  # a drained manifest swap added, dropped or re-tiered it
    MANIFEST_SWAP_ABORTED = "manifest_swap_aborted"  # a failed swap undid its warm-up
    LOAD_FAILED = "load_failed"  # unloaded -> unloaded: the placement could not be loaded
    COMMAND = "command"  # an operator's command
    # a session's KV cache
    IDLE = "idle"  # the session LRU: idle past lru.idle_threshold
    MAX_ACTIVE_SESSIONS = "max_active_sessions"  # the least recently used of one too many on its model
    MODEL_UNLOADED = "model_unloaded"  # its model left the worker
    CLOSED = "closed"  # the session ended
    # a shared prefix's KV cache
    PREFIX_CACHE_FULL = "prefix_cache_full"  # the least recently used beyond its model's prefix cache bytes
    # a worker
    HEARTBEAT_TIMEOUT = "heartbeat_timeout"  # it missed too many heartbeats
    SHUTDOWN = "shutdown"  # it stopped on its own


class WorkerRole(StrEnum):
    """What a worker hosts: placement puts the manifest's entry model on router hosts (router_svc
    instances, which classify in-process) and every other model on specialist workers."""

    ROUTER = "router"  # a router_svc instance: the entry model's worker
    SPECIALIST = "specialist"  # a specialist_worker: specialists and the fallback (and, before roles, everything)


class DeviceKind(StrEnum):
    """What a worker runs its models on (the ``kind`` of its :class:`nrt.core.device.Device`)."""

    CPU = "cpu"  # the host's processors; resident models live in its RAM
    CUDA = "cuda"  # an NVIDIA GPU through ONNX Runtime's CUDA execution provider


class DeviceRequirement(StrEnum):
    """Where a manifest model may run (its ``device`` key); placement honours it."""

    GPU = "gpu"  # only on a worker with a GPU (accelerator memory)
    CPU = "cpu"  # only on a worker without one
    ANY = "any"  # wherever it fits (the default)


class WeightFormat(StrEnum):
    """How a model's weights are stored for serving (its manifest ``quantization`` key): an operator's
    checkpoint is prepared in the format asked for; without one, int8 on a CPU and fp16 on a GPU."""

    INT4 = "int4"  # 4-bit blocks (MatMulNBits): a quarter of fp32's bytes; CPU
    INT8 = "int8"  # 8-bit blocks: the CPU default
    FP16 = "fp16"  # float16 weight matrices: the GPU default
    NONE = "none"  # the checkpoint's own float32 weights, unquantised


class KeyScope(StrEnum):
    """What an API key may do: ``infer`` calls the ``/v1`` API; ``admin`` also changes the cluster
    (the manifest, the keys) and may infer."""

    INFER = "infer"
    ADMIN = "admin"


class DrainOutcome(StrEnum):
    """How the drain of a manifest swap ended (``DrainCompleted.outcome``)."""

    DRAINED = "drained"  # every request admitted under the old version finished
    TIMED_OUT = "timed_out"  # drain.timeout passed: cut over, the rest abandoned
    ABORTED = "aborted"  # the cut-over failed: the old manifest still serves


class ApplyOutcome(StrEnum):
    """What a manifest apply did (``ApplyResult.outcome``)."""

    APPLIED = "applied"  # a new version is in force
    UNCHANGED = "unchanged"  # the text is the manifest in force: nothing to do


FinishReason = Literal["stop", "length"]
"""Why an answer ended (a completed request's outcome): a stop sequence or end of text, or max_tokens."""
