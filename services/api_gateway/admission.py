"""Admission control: no new request starts while a manifest swap is cutting over.

The gate follows the event stream: a ``DrainStarted`` closes it; the ``ManifestApplied``
of the drain's target version (or a ``DrainCompleted`` whose swap was aborted, leaving
the old manifest in force) opens it again. A new request waits up to the manifest's
``drain.admission_wait`` for the gate, then gets 503 with ``Retry-After``. Once
admitted, a request is pinned to the manifest version in force at that moment.
"""

from __future__ import annotations

import asyncio
import math
from dataclasses import dataclass
from datetime import datetime

from api_gateway.errors import ApiError
from nrt.adapters.bus.follow import EventFollower
from nrt.core.events import AnyEvent, DrainCompleted, DrainStarted, ManifestApplied
from nrt.core.manifest import Manifest, ManifestError
from nrt.core.state import ClusterState


@dataclass(frozen=True, slots=True)
class Admission:
    version: int
    manifest: Manifest


class AdmissionGate:
    """Register before ``follower.start()`` so that the replay of the stream sets it right."""

    def __init__(self, follower: EventFollower) -> None:
        self.follower = follower
        self.swap_to: int | None = None  # the version a swap in progress cuts over to
        self.applied_at: datetime | None = None  # when the manifest in force was applied
        self._open = asyncio.Event()
        self._open.set()
        follower.listen(self._on_event)

    def _on_event(self, event: AnyEvent, _state: ClusterState) -> None:
        if isinstance(event, DrainStarted):
            self.swap_to = event.to_version
            self._open.clear()
        elif isinstance(event, ManifestApplied):
            self.applied_at = event.occurred_at
            if self.swap_to is not None and event.version >= self.swap_to:
                self._reopen()
        elif isinstance(event, DrainCompleted) and event.outcome == "aborted":
            self._reopen()

    def _reopen(self) -> None:
        self.swap_to = None
        self._open.set()

    @property
    def swapping(self) -> bool:
        return not self._open.is_set()

    def manifest(self) -> Manifest:
        """The manifest in force; 503 when there is none (or it does not parse)."""
        try:
            manifest = self.follower.manifest
        except ManifestError as exc:
            version = self.follower.state.manifest_version
            raise ApiError(
                503, f"the manifest in force (v{version}) is invalid: {exc}", code="manifest_invalid"
            ) from None
        if manifest is None:
            raise ApiError(503, "no manifest has been applied to the cluster yet", code="no_manifest")
        return manifest

    async def admit(self) -> Admission:
        """The manifest version this request runs under; 503 when there is none or a swap outlasts the wait."""
        manifest = self.manifest()
        if self.swapping:
            wait = manifest.drain.admission_wait
            try:
                async with asyncio.timeout(wait):
                    await self._open.wait()
            except TimeoutError:
                retry = max(1, math.ceil(wait))
                raise ApiError(
                    503,
                    f"the cluster is swapping to manifest v{self.swap_to}; waited {wait:g}s for the swap to finish, "
                    f"retry in {retry}s",
                    code="manifest_swap_in_progress",
                    headers={"Retry-After": str(retry)},
                ) from None
            manifest = self.manifest()
        return Admission(version=self.follower.state.manifest_version, manifest=manifest)
