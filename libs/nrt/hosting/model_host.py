"""The models this worker hosts: their tiers, and the runtimes built on the shared weights.

Tier changes go through :class:`nrt.adapters.inference.ArtifactRegistry`, which shares one copy of
an artifact's bytes (standby) and one ONNX Runtime session (resident) between every model
id that uses it. A runtime — a :class:`BatchingGenerator` for a causal LM or an
:class:`Encoder` — is built per artifact once its session exists, and dropped with it.
All methods are blocking (file reads, session builds): call them from a thread.

What a resident holds is measured on the worker's device (:mod:`nrt.hosting.device_memory`)
around its session's build: on a GPU, the device memory the session took (its weights there and
ONNX Runtime's arena); on a CPU host, the RAM it added, on top of the weights held for standby.
"""

from __future__ import annotations

import logging
import threading
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path

from nrt.adapters.bus.errors import BadRequest, Unavailable
from nrt.adapters.inference import ArtifactRegistry, BatchingGenerator, CausalLM, Encoder, TierChange
from nrt.adapters.inference.artifact import read_record
from nrt.adapters.inference.batching import DEFAULT_PREFIX_CACHE_BYTES
from nrt.adapters.inference.chat_template import ChatTemplate
from nrt.adapters.inference.weights import CUDA
from nrt.adapters.metrics import ModelLoad
from nrt.core.vocabulary import DeviceKind, Tier
from nrt.hosting.device_memory import DeviceMemory, HostMemory
from nrt.hosting.model_sources import LocalArtifact, RemoteEndpoint
from nrt.hosting.session_table import SessionTable

log = logging.getLogger("nrt.worker")

Runtime = BatchingGenerator | Encoder
BatchObserver = Callable[[str], Callable[[int], None]]  # model id -> what its batcher tells each step's size


def session_key(model_id: str, session_id: str) -> str:
    """The engine's key for a conversation's KV cache on one model (sessions are per model)."""
    return f"{model_id}/{session_id}"


@dataclass(slots=True)
class Hosted:
    model_id: str
    source: str
    target: LocalArtifact | RemoteEndpoint
    active_requests: int = 0
    sessions: SessionTable = field(default_factory=SessionTable)  # conversations with KV here
    artifact_dir: Path | None = None  # a local artifact's directory, resolved once (the registry's key)
    decode_tokens_per_s: float | None = None  # recent decode speed here (an average over recent answers)

    def __post_init__(self) -> None:
        if isinstance(self.target, LocalArtifact) and self.artifact_dir is None:
            self.artifact_dir = Path(self.target.path).resolve()

    def observe_speed(self, tokens_per_s: float) -> None:
        """Fold one answer's measured decode speed into the recent average."""
        self.decode_tokens_per_s = recent_speed(self.decode_tokens_per_s, tokens_per_s)

    @property
    def remote(self) -> bool:
        return isinstance(self.target, RemoteEndpoint)


SPEED_WEIGHT = 0.3  # the weight of the newest answer in the recent decode speed


def recent_speed(previous: float | None, sample: float) -> float:
    """An exponential moving average of decode speeds (the first sample stands alone)."""
    if previous is None:
        return sample
    return previous + SPEED_WEIGHT * (sample - previous)


@dataclass(frozen=True, slots=True)
class Transition:
    """A measured tier change of one model on this worker."""

    model_id: str
    from_tier: Tier
    to_tier: Tier
    elapsed_ms: float
    bytes_held: int

    @property
    def changed(self) -> bool:
        return self.from_tier != self.to_tier


class ModelHost:
    def __init__(
        self,
        registry: ArtifactRegistry,
        max_batch_size: int = 16,
        batch_observer: BatchObserver | None = None,
        memory: DeviceMemory | None = None,
        prefix_cache_bytes: int = DEFAULT_PREFIX_CACHE_BYTES,
    ) -> None:
        self.registry = registry
        self.prefix_cache_bytes = prefix_cache_bytes  # each causal runtime's shared prefixes' KV, at most
        self.memory: DeviceMemory = memory if memory is not None else HostMemory()  # where residents live
        # a session ONNX Runtime could not put on the GPU runs from RAM: measured there
        self._ram: DeviceMemory = self.memory if self.memory.device.kind is DeviceKind.CPU else HostMemory()
        self.max_batch_size = max_batch_size
        self.batch_observer = batch_observer
        self.hosted: dict[str, Hosted] = {}
        self._runtimes: dict[Path, Runtime] = {}
        self._session_bytes: dict[Path, int] = {}  # measured memory of each live session
        self._on_device: set[Path] = set()  # the live sessions whose memory is on the GPU
        self._chat_templates: dict[Path, ChatTemplate | None] = {}  # each artifact's own, read once
        self._lock = threading.RLock()

    # -- queries ---------------------------------------------------------------------------

    def get(self, model_id: str) -> Hosted:
        hosted = self.hosted.get(model_id)
        if hosted is None:
            raise Unavailable(f"model '{model_id}' is not hosted on this worker", code="model_not_hosted")
        return hosted

    def tier(self, model_id: str) -> Tier:
        hosted = self.hosted.get(model_id)
        if hosted is None:
            return Tier.UNLOADED
        return Tier.REMOTE if hosted.remote else self.registry.tier(model_id)

    def bytes_held(self, model_id: str) -> int:
        hosted = self.hosted.get(model_id)
        if hosted is None or hosted.remote:
            return 0
        path = self._path(hosted)
        held = self.registry.weights(model_id).nbytes
        if self.registry.tier(model_id) != Tier.RESIDENT:
            return held
        session = self._session_bytes.get(path, 0)
        # on the GPU a resident is charged what it holds there (its RAM copy is not on the device)
        return session if path in self._on_device else held + session

    def loads(self) -> list[ModelLoad]:
        """Each hosted model's tier, bytes, and its batcher's queue and rows (for the metrics, at a scrape)."""
        with self._lock:
            out = []
            for model_id, hosted in self.hosted.items():
                runtime = self._runtimes.get(hosted.artifact_dir) if hosted.artifact_dir is not None else None
                stats = runtime.stats() if isinstance(runtime, BatchingGenerator) else None
                out.append(
                    ModelLoad(
                        model_id=model_id,
                        tier=self.tier(model_id).value,
                        bytes_held=self.bytes_held(model_id),
                        queued=stats.queued if stats is not None else 0,
                        running=stats.active + stats.prefilling if stats is not None else 0,
                    )
                )
            return out

    def runtime(self, model_id: str) -> Runtime:
        with self._lock:
            hosted = self.get(model_id)
            if hosted.remote:
                raise BadRequest(f"model '{model_id}' is remote; it has no local runtime")
            if self.registry.tier(model_id) != "resident":
                raise Unavailable(f"model '{model_id}' is not resident", code="model_not_resident")
            return self._runtimes[self._path(hosted)]

    def chat_template(self, model_id: str) -> ChatTemplate | None:
        """The chat template the model's tokenizer carries (``tokenizer_config.json``), None without one."""
        hosted = self.get(model_id)
        path = hosted.artifact_dir
        if path is None:
            return None
        with self._lock:
            if path not in self._chat_templates:
                self._chat_templates[path] = ChatTemplate.from_artifact(path)
            return self._chat_templates[path]

    def evict_session(self, model_id: str, session_id: str) -> int:
        """Drop a conversation's KV cache (held only while the model is resident); the bytes freed."""
        hosted = self.get(model_id)
        freed = 0
        if self.tier(model_id) == Tier.RESIDENT:
            runtime = self.runtime(model_id)
            if isinstance(runtime, BatchingGenerator):
                freed = runtime.evict_session(session_key(model_id, session_id))
        hosted.sessions.discard(session_id)
        return freed

    # -- transitions ---------------------------------------------------------------------------

    def load(self, model_id: str, source: str, target: LocalArtifact | RemoteEndpoint) -> Transition:
        """unloaded -> standby (bytes in RAM), or -> remote for an endpoint."""
        with self._lock:
            current = self.hosted.get(model_id)
            if current is not None:
                if current.source != source:
                    raise BadRequest(
                        f"model '{model_id}' already hosts {current.source}; unload it before loading {source}"
                    )
                tier = self.tier(model_id)
                return Transition(model_id, tier, tier, 0.0, self.bytes_held(model_id))
            hosted = Hosted(model_id=model_id, source=source, target=target)
            if isinstance(target, RemoteEndpoint):
                self.hosted[model_id] = hosted
                return Transition(model_id, Tier.UNLOADED, Tier.REMOTE, 0.0, 0)
            change = self.registry.load(model_id, target.path)
            self.hosted[model_id] = hosted
            return self._transition(change)

    def promote(self, model_id: str) -> Transition:
        """standby -> resident: build (or share) the session and its runtime."""
        with self._lock:
            hosted = self.get(model_id)
            if hosted.remote:
                return Transition(model_id, Tier.REMOTE, Tier.REMOTE, 0.0, 0)
            path = self._path(hosted)
            before, before_ram = self.memory.used_bytes(), self._ram.used_bytes()
            change = self.registry.promote(model_id)
            if path not in self._runtimes:
                self._runtimes[path] = self._build_runtime(path, model_id)
                if self.memory.device.kind is DeviceKind.CUDA and change.provider == CUDA:
                    self._session_bytes[path] = max(0, self.memory.used_bytes() - before)
                    self._on_device.add(path)
                else:
                    if self.memory.device.kind is DeviceKind.CUDA:
                        log.warning("%s: ONNX Runtime built its session on %s, not the GPU", model_id, change.provider)
                    self._session_bytes[path] = max(0, self._ram.used_bytes() - before_ram)
            return self._transition(change)

    def demote(self, model_id: str) -> Transition:
        """resident -> standby: the session goes when no other model id is resident on it."""
        with self._lock:
            hosted = self.get(model_id)
            if hosted.remote:
                return Transition(model_id, Tier.REMOTE, Tier.REMOTE, 0.0, 0)
            change = self.registry.demote(model_id)
            self._drop_runtime_if_sessionless(self._path(hosted))
            return self._transition(change)

    def unload(self, model_id: str) -> Transition:
        with self._lock:
            hosted = self.get(model_id)
            if hosted.remote:
                del self.hosted[model_id]
                return Transition(model_id, Tier.REMOTE, Tier.UNLOADED, 0.0, 0)
            change = self.registry.unload(model_id)
            del self.hosted[model_id]
            self._drop_runtime_if_sessionless(self._path(hosted))
            return self._transition(change)

    def close(self) -> None:
        with self._lock:
            for runtime in self._runtimes.values():
                if isinstance(runtime, BatchingGenerator):
                    runtime.close()
            self._runtimes.clear()

    # -- internals -----------------------------------------------------------------------------

    @staticmethod
    def _path(hosted: Hosted) -> Path:
        assert hosted.artifact_dir is not None, f"{hosted.model_id} is not a local artifact"
        return hosted.artifact_dir

    def _build_runtime(self, path: Path, model_id: str) -> Runtime:
        session = self.registry.session(model_id)
        if read_record(path).kind == "encoder":
            return Encoder(session, path)
        on_step = self.batch_observer(model_id) if self.batch_observer is not None else None
        return BatchingGenerator(
            CausalLM(session, path),
            max_batch_size=self.max_batch_size,
            on_step=on_step,
            prefix_cache_bytes=self.prefix_cache_bytes,
        )

    def _drop_runtime_if_sessionless(self, path: Path) -> None:
        live = {usage.artifact_dir for usage in self.registry.usage() if usage.has_session}
        if path not in live and path in self._runtimes:
            runtime = self._runtimes.pop(path)
            self._session_bytes.pop(path, None)
            self._on_device.discard(path)
            if isinstance(runtime, BatchingGenerator):
                runtime.close()

    def _transition(self, change: TierChange) -> Transition:
        return Transition(
            model_id=change.model_id,
            from_tier=change.from_tier,
            to_tier=change.to_tier,
            elapsed_ms=change.elapsed_ms,
            bytes_held=self.bytes_held(change.model_id) if change.model_id in self.hosted else 0,
        )
