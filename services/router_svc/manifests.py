"""Every recent manifest version, so that each request is routed under the one it was admitted with."""

from __future__ import annotations

import contextlib
import logging

from nrt.adapters.bus.errors import Unavailable
from nrt.adapters.bus.follow import EventFollower
from nrt.core.events import AnyEvent, ManifestApplied
from nrt.core.manifest import Manifest, ManifestError, parse_manifest
from nrt.core.state import ClusterState

log = logging.getLogger("router_svc.manifests")


class ManifestHistory:
    """Manifests by version, parsed from the ``ManifestApplied`` events the follower folds.

    Register before ``follower.start()`` so that the replay of the stream fills it.
    """

    def __init__(self, follower: EventFollower, keep: int = 8) -> None:
        self.follower = follower
        self.keep = keep
        self._by_version: dict[int, Manifest] = {}
        follower.listen(self._on_event)

    def _on_event(self, event: AnyEvent, _state: ClusterState) -> None:
        if not isinstance(event, ManifestApplied):
            return
        try:
            self._by_version[event.version] = parse_manifest(event.text, f"manifest v{event.version}")
        except ManifestError as exc:  # cluster_state validates before applying; log rather than crash
            log.error("manifest v%d does not parse: %s", event.version, exc)
            return
        for old in sorted(self._by_version)[: -self.keep]:
            del self._by_version[old]

    @property
    def versions(self) -> tuple[int, ...]:
        return tuple(sorted(self._by_version))

    async def at(self, version: int, within: float) -> Manifest:
        """The manifest of ``version``, waiting up to ``within`` seconds for it to arrive."""
        if version not in self._by_version and self.follower.state.manifest_version < version:
            with contextlib.suppress(TimeoutError):
                await self.follower.wait_for(lambda s: s.manifest_version >= version, within=within)
        manifest = self._by_version.get(version)
        if manifest is None:
            known = ", ".join(map(str, self.versions)) or "none"
            raise Unavailable(
                f"manifest version {version} is not known to router_svc (known versions: {known})",
                code="manifest_unknown",
            )
        return manifest
