"""A worker's side of the cluster's artifact store: fetch a prepared artifact before preparing it, publish
what it prepared (or found prepared here) so that other hosts need not.

Loading resolves a model's source in a thread (``nrt.hosting.model_sources``); :meth:`ArtifactShare.obtain`
is called from there and runs the bus calls on the worker's event loop, holding the artifact's build lock
while it downloads into a staging directory and renames it into place, so a concurrent build or fetch
on this host waits and then finds it ready. :meth:`ArtifactShare.offer` publishes in the background:
a load never waits for an upload.
"""

from __future__ import annotations

import asyncio
import logging
import time
from collections.abc import Coroutine, Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Literal, TypeVar

import nats.errors
from nats.aio.client import Client

from nrt.adapters.bus.artifact_store import ArtifactRefused, ArtifactStore
from nrt.adapters.bus.replication import replicas_for
from nrt.adapters.catalogue.exchange import describe_variant, install_fetched, local_digests
from nrt.adapters.catalogue.layout import artifact_dir, build_lock, staging_dir
from nrt.adapters.catalogue.published import Fetch, Prepare, SourceAlias, UseLocal, decide
from nrt.adapters.catalogue.record import Provider
from nrt.adapters.catalogue.variants import PROVIDERS, variant_path
from nrt.adapters.inference.errors import ArtifactError

log = logging.getLogger("nrt.worker")
BUS_TIMEOUT_S = 10.0  # one lookup on the bus (a download has no limit: it moves as fast as the bus does)
T = TypeVar("T")


@dataclass(frozen=True, slots=True)
class Obtained:
    """A variant this host can load now, and whether it was fetched for this load or was already here."""

    directory: Path
    fetched: bool


@dataclass(frozen=True, slots=True)
class Transfer:
    """One variant moved over the bus by this worker, measured."""

    direction: Literal["fetched", "published"]
    name: str
    provider: Provider
    bytes: int  # published: the bytes uploaded (files already in the store are not sent again)
    seconds: float


class ArtifactShare:
    def __init__(self, nc: Client, replicas: int | None = None) -> None:
        self.nc = nc
        self.replicas = replicas  # the bucket's copies when this worker creates it (None: by the cluster's size)
        self.store: ArtifactStore | None = None
        self.transfers: list[Transfer] = []  # what this worker fetched and published, in order
        self._loop: asyncio.AbstractEventLoop | None = None
        self._publishing: set[asyncio.Task[None]] = set()

    async def start(self) -> None:
        """Open (or create) the bucket; without it the worker prepares everything itself, as before."""
        self._loop = asyncio.get_running_loop()
        try:
            js = self.nc.jetstream(timeout=BUS_TIMEOUT_S)
            self.store = await ArtifactStore.open(js, replicas_for(self.nc, self.replicas))
        except Exception as exc:  # no JetStream, no permission: sharing is off, loading works as it did
            log.warning("prepared artifacts are not shared over the bus: %s", exc)

    async def settle(self) -> None:
        """Wait for the publications under way (a worker stopping, a test)."""
        while self._publishing:
            await asyncio.gather(*self._publishing, return_exceptions=True)

    # -- called from the thread that resolves a source -------------------------------------------

    def obtain(
        self, key: str, provider: Provider, *, name: str | None = None, recipes: Mapping[Provider, str] | None = None
    ) -> Obtained | None:
        """The variant serving ``provider`` of what source key ``key`` names, from the cluster's store: already
        here with the published digest, or fetched, verified and installed now. None when nothing usable is
        published (the caller prepares it, or fails as before) or a fetched file is refused. ``name``: the
        artifact's name when this host could resolve the source (else the source's alias names it);
        ``recipes``: this host's recipe per variant, when known."""
        if self.store is None:
            return None
        store = self.store
        try:
            name = name or self._run(store.alias(key), BUS_TIMEOUT_S)
            if name is None:
                return None
            published = {p: v for p in PROVIDERS if (v := self._run(store.variant(name, p), BUS_TIMEOUT_S))}
            decision = decide(provider, published, local_digests(name, tuple(published)), recipes)
            if isinstance(decision, Prepare):
                log.info("%s: not fetched from the cluster's artifacts (%s)", key, decision.reason)
                return None
            directory = variant_path(artifact_dir(name), decision.variant.provider)
            if isinstance(decision, UseLocal):
                return Obtained(directory, fetched=False)
            assert isinstance(decision, Fetch)
            started = time.perf_counter()
            with build_lock(name), staging_dir(name) as staging:
                if local_digests(name, (decision.variant.provider,)).get(decision.variant.provider) == (
                    decision.variant.digest
                ):  # fetched by another worker of this host while we waited for the lock
                    return Obtained(directory, fetched=False)
                self._run(store.download(decision.variant, staging), None)
                install_fetched(staging, decision.variant)
            elapsed = time.perf_counter() - started
            self.transfers.append(
                Transfer("fetched", name, decision.variant.provider, decision.variant.total_bytes, elapsed)
            )
            log.info(
                "%s: fetched its %s variant %s (%d bytes) from the cluster's artifacts in %.1f s, verified",
                key,
                decision.variant.provider,
                decision.variant.digest[:12],
                decision.variant.total_bytes,
                elapsed,
            )
            return Obtained(directory, fetched=True)
        except ArtifactRefused as exc:
            log.warning(
                "%s: refused what the cluster's artifacts hold (%s); nothing installed, preparing it here", key, exc
            )
            return None
        except (TimeoutError, OSError, ArtifactError, nats.errors.Error) as exc:
            log.warning("%s: could not fetch it from the cluster's artifacts (%s); preparing it here", key, exc)
            return None

    def offer(self, key: str, name: str) -> None:
        """Publish the ready variants of artifact ``name`` and ``key``'s alias to it, in the background."""
        if self.store is None or self._loop is None:
            return
        self._loop.call_soon_threadsafe(self._start_publishing, key, name)

    # -- on the event loop -------------------------------------------------------------------------

    def _start_publishing(self, key: str, name: str) -> None:
        task = asyncio.create_task(self._publish(key, name))
        self._publishing.add(task)
        task.add_done_callback(self._publishing.discard)

    async def _publish(self, key: str, name: str) -> None:
        assert self.store is not None
        try:
            ready = False
            for provider in PROVIDERS:
                variant = await asyncio.to_thread(describe_variant, name, provider)
                if variant is None:
                    continue
                ready = True
                current = await self.store.variant(name, provider)
                if current is not None and current.digest == variant.digest:
                    continue
                started = time.perf_counter()
                sent = await self.store.publish(variant_path(artifact_dir(name), provider), variant)
                elapsed = time.perf_counter() - started
                self.transfers.append(Transfer("published", name, provider, sent, elapsed))
                log.info(
                    "published the %s variant of %s (%d bytes uploaded) to the cluster's artifacts in %.1f s",
                    provider,
                    name,
                    sent,
                    elapsed,
                )
            if ready and await self.store.alias(key) != name:
                await self.store.publish_alias(SourceAlias(key=key, name=name))
        except Exception as exc:  # sharing is a convenience: a failed upload costs other hosts a build, no more
            log.warning("could not publish %s to the cluster's artifacts: %s", name, exc)

    def _run(self, work: Coroutine[Any, Any, T], timeout: float | None) -> T:
        assert self._loop is not None
        future = asyncio.run_coroutine_threadsafe(work, self._loop)
        try:
            return future.result(timeout)
        except TimeoutError:
            future.cancel()
            raise
