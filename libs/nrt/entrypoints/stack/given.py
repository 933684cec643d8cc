"""The manifest ``nrt up`` is given, against the one its data directory's log holds.

A different manifest is applied by cluster_state at start as the next version (a drained swap);
``nrt up`` says so before it starts the services, and once ready, that the gateway serves it.
"""

from __future__ import annotations

import asyncio
import time
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

import httpx

from nrt.adapters.manifest_sources import footprint_of
from nrt.adapters.store import EventStore
from nrt.core.events import ManifestApplied
from nrt.core.manifest import Manifest, ManifestChanges, ManifestError, diff_manifests, parse_manifest

POLL_S = 0.5


@dataclass(frozen=True, slots=True)
class GivenManifest:
    path: Path
    manifest: Manifest
    in_force: int  # the version the log holds (0: none yet)
    differs: bool  # from the manifest in force (a first manifest does not differ: it is version 1)
    changes: ManifestChanges | None = None  # what it changes against the one in force (None: not known)

    def announcement(self) -> str:
        """What ``nrt up`` says before it starts the services."""
        if self.in_force == 0:
            return f"applying {self.path} as manifest v1"
        if not self.differs:
            return f"manifest v{self.in_force} in force is {self.path}, unchanged"
        what = f": {self.changes.summary()}" if self.changes is not None else ""
        return (
            f"{self.path} differs from manifest v{self.in_force} in force: cluster_state applies it as "
            f"v{self.in_force + 1} (a drained swap){what}"
        )


async def compare_with_log(database_url: str, path: Path, manifest: Manifest) -> GivenManifest:
    """``manifest`` (read from ``path``) against the latest ``ManifestApplied`` of the log at ``database_url``."""
    store = EventStore.connect(database_url, pool_size=1)
    try:
        records = await store.read_stream("manifest")
    finally:
        await store.close()
    applied = [r.event for r in records if isinstance(r.event, ManifestApplied)]
    if not applied:
        return GivenManifest(path, manifest, 0, differs=False)
    latest = applied[-1]
    if latest.digest == manifest.digest:
        return GivenManifest(path, manifest, latest.version, differs=False)
    try:
        previous = parse_manifest(latest.text, f"manifest v{latest.version}", footprint_of)
    except ManifestError:  # written by another version of NRT: the swap still applies the one given
        return GivenManifest(path, manifest, latest.version, differs=True)
    return GivenManifest(path, manifest, latest.version, differs=True, changes=diff_manifests(previous, manifest))


async def wait_served(gateway_url: str, api_key: str, digest: str, within: float, say: Callable[[str], None]) -> int:
    """Wait until the gateway serves the manifest with ``digest``; its version. TimeoutError after ``within``."""
    deadline = time.monotonic() + within
    headers = {"Authorization": f"Bearer {api_key}"}
    said = False
    async with httpx.AsyncClient(timeout=2, headers=headers) as client:
        while time.monotonic() < deadline:
            try:
                info = (await client.get(f"{gateway_url}/v1/manifest")).json()
            except (httpx.TransportError, ValueError):
                info = {}
            if info.get("digest") == digest:
                return int(info["version"])
            if not said and "version" in info:
                say(
                    f"waiting for cluster_state to apply the manifest given (manifest v{info['version']} in force; "
                    "if it cannot, cluster_state's log in the data directory's logs/ says why)"
                )
                said = True
            await asyncio.sleep(POLL_S)
    raise TimeoutError(f"the manifest given was not applied within {within:g}s")
