"""Share one loaded copy of an artifact between the model ids that use it.

Keyed by the resolved artifact path. Each model id holds the artifact at a tier
(``standby`` or ``resident``); the weights live while any id holds them, the session
while any id is resident. Every change returns a measured :class:`TierChange`.
"""

from __future__ import annotations

import threading
import time
from collections.abc import Sequence
from dataclasses import dataclass, field
from pathlib import Path

import onnxruntime as ort

from nrt.adapters.inference.errors import InferenceError
from nrt.adapters.inference.weights import Spin, Weights, active_provider, build_session, load_weights
from nrt.core.vocabulary import Tier as Tier  # the one tier type; the registry holds unloaded, standby or resident


@dataclass(frozen=True, slots=True)
class TierChange:
    """One measured transition of one model id."""

    model_id: str
    artifact_dir: Path
    from_tier: Tier
    to_tier: Tier
    elapsed_ms: float
    bytes_loaded: int  # bytes newly read into RAM by this change (0 when shared)
    bytes_freed: int  # bytes released by this change (0 while another id still holds them)
    shared: bool  # the change reused (or left in place) a copy held for another model id
    provider: str | None = None  # for a change to resident: the provider actually in use


@dataclass(frozen=True, slots=True)
class ArtifactUsage:
    """What one artifact holds now and for whom."""

    artifact_dir: Path
    weights_bytes: int
    has_session: bool
    provider: str | None
    holders: tuple[tuple[str, Tier], ...]


@dataclass(slots=True, eq=False)
class _Entry:
    weights: Weights
    session: ort.InferenceSession | None = None
    provider: str | None = None
    tiers: dict[str, Tier] = field(default_factory=dict)


class ArtifactRegistry:
    """Refcounted weights and sessions, one per artifact directory. Thread-safe."""

    def __init__(
        self, providers: Sequence[str] | None = None, *, intra_op_threads: int | None = None, spin: Spin = "never"
    ) -> None:
        self._providers = list(providers) if providers is not None else None
        self._threads = intra_op_threads
        self._spin = spin
        self._entries: dict[Path, _Entry] = {}
        self._owner: dict[str, Path] = {}
        self._lock = threading.RLock()

    def tier(self, model_id: str) -> Tier:
        with self._lock:
            path = self._owner.get(model_id)
            return Tier.UNLOADED if path is None else self._entries[path].tiers[model_id]

    def weights(self, model_id: str) -> Weights:
        with self._lock:
            return self._entry(model_id).weights

    def session(self, model_id: str) -> ort.InferenceSession:
        with self._lock:
            entry = self._entry(model_id)
            if entry.tiers[model_id] != Tier.RESIDENT or entry.session is None:
                raise InferenceError(f"model {model_id!r} is not resident")
            return entry.session

    def load(self, model_id: str, artifact_dir: Path | str) -> TierChange:
        """unloaded -> standby: read the bytes, or share the copy another id already holds."""
        path = Path(artifact_dir).resolve()
        with self._lock:
            current = self._owner.get(model_id)
            if current is not None:
                if current != path:
                    raise InferenceError(f"model {model_id!r} already holds {current}; unload it before loading {path}")
                tier = self._entries[path].tiers[model_id]
                return TierChange(model_id, path, tier, tier, 0.0, 0, 0, True)
            started = time.perf_counter()
            entry = self._entries.get(path)
            shared = entry is not None
            if entry is None:
                entry = _Entry(weights=load_weights(path))
                self._entries[path] = entry
            entry.tiers[model_id] = Tier.STANDBY
            self._owner[model_id] = path
            return TierChange(
                model_id=model_id,
                artifact_dir=path,
                from_tier=Tier.UNLOADED,
                to_tier=Tier.STANDBY,
                elapsed_ms=(time.perf_counter() - started) * 1e3,
                bytes_loaded=0 if shared else entry.weights.nbytes,
                bytes_freed=0,
                shared=shared,
            )

    def promote(self, model_id: str) -> TierChange:
        """standby -> resident: build a session from the bytes, or share the live one."""
        with self._lock:
            entry = self._entry(model_id)
            path = self._owner[model_id]
            from_tier = entry.tiers[model_id]
            started = time.perf_counter()
            shared = entry.session is not None
            if entry.session is None:
                entry.session = build_session(
                    entry.weights, self._providers, intra_op_threads=self._threads, spin=self._spin
                )
                entry.provider = active_provider(entry.session)
            entry.tiers[model_id] = Tier.RESIDENT
            return TierChange(
                model_id=model_id,
                artifact_dir=path,
                from_tier=from_tier,
                to_tier=Tier.RESIDENT,
                elapsed_ms=(time.perf_counter() - started) * 1e3,
                bytes_loaded=0,
                bytes_freed=0,
                shared=shared or from_tier == Tier.RESIDENT,
                provider=entry.provider,
            )

    def demote(self, model_id: str) -> TierChange:
        """resident -> standby: drop the session when no other id is resident on it."""
        with self._lock:
            entry = self._entry(model_id)
            path = self._owner[model_id]
            from_tier = entry.tiers[model_id]
            started = time.perf_counter()
            entry.tiers[model_id] = Tier.STANDBY
            still_used = any(t == Tier.RESIDENT for t in entry.tiers.values())
            if not still_used:
                entry.session = None
                entry.provider = None
            return TierChange(
                model_id,
                path,
                from_tier,
                Tier.STANDBY,
                (time.perf_counter() - started) * 1e3,
                0,
                0,
                still_used,
            )

    def unload(self, model_id: str) -> TierChange:
        """any -> unloaded: free the bytes (and session) when this was the last holder."""
        with self._lock:
            entry = self._entry(model_id)
            path = self._owner.pop(model_id)
            from_tier = entry.tiers.pop(model_id)
            started = time.perf_counter()
            freed = 0
            if not entry.tiers:
                freed = entry.weights.nbytes
                del self._entries[path]
            elif not any(t == Tier.RESIDENT for t in entry.tiers.values()):
                entry.session = None
                entry.provider = None
            return TierChange(
                model_id,
                path,
                from_tier,
                Tier.UNLOADED,
                (time.perf_counter() - started) * 1e3,
                0,
                freed,
                freed == 0,
            )

    def usage(self) -> list[ArtifactUsage]:
        with self._lock:
            return [
                ArtifactUsage(
                    artifact_dir=path,
                    weights_bytes=entry.weights.nbytes,
                    has_session=entry.session is not None,
                    provider=entry.provider,
                    holders=tuple(sorted(entry.tiers.items())),
                )
                for path, entry in self._entries.items()
            ]

    def _entry(self, model_id: str) -> _Entry:
        path = self._owner.get(model_id)
        if path is None:
            raise InferenceError(f"model {model_id!r} is not loaded")
        return self._entries[path]
