"""Prepared artifacts in the cluster's JetStream object store (bucket ``NRT_ARTIFACTS``): publish, look up, fetch.

Objects (names in :mod:`nrt.adapters.catalogue.published`): ``sha256/<hex>``, a file's bytes, stored once
whatever artifacts share it; ``artifacts/<name>/<provider>``, a :class:`PublishedVariant` (the manifest of
one variant's files); ``sources/<hash>``, a :class:`SourceAlias` from a manifest's source to the artifact's
name. Files stream from and to disk (nats chunks them, 128 KiB a message by default, so the server's
``max_payload`` never limits a file's size); a fetched file is hashed as it is written, and a file whose
sha256 or size is not the manifest's raises :class:`ArtifactRefused`.
"""

from __future__ import annotations

import asyncio
import hashlib
import logging
from pathlib import Path
from typing import BinaryIO

import msgspec
from nats.js import JetStreamContext
from nats.js.api import ObjectMeta, ObjectMetaOptions
from nats.js.errors import DigestMismatchError, ObjectNotFoundError
from nats.js.object_store import ObjectStore

from nrt.adapters.bus.jetstream import ensure_artifacts_bucket
from nrt.adapters.catalogue.published import (
    PublishedVariant,
    SourceAlias,
    alias_object,
    blob_object,
    file_problem,
    variant_object,
)
from nrt.adapters.catalogue.record import Provider

# a file's download gives up (TimeoutError) when it stalls below this rate: a publisher that replaced the
# object under it, a server that went away; the worker then prepares the model itself
MIN_FETCH_BYTES_PER_S = 1_000_000
FETCH_GRACE_S = 30.0
CHUNK_BYTES = 128 * 1024  # nats' default: well under any server's max_payload (1 MiB by default)

log = logging.getLogger("nrt.adapters.bus.artifact_store")


class ArtifactRefused(Exception):
    """A fetched file is not what the manifest published (corrupt, partial or replaced): never installed."""


class _HashingWriter:
    """A file that hashes what is written to it (nats' ``get(writeinto=...)`` writes each chunk in a thread)."""

    def __init__(self, handle: BinaryIO) -> None:
        self.handle = handle
        self.digest = hashlib.sha256()
        self.size = 0

    def write(self, data: bytes) -> int:
        self.digest.update(data)
        self.size += len(data)
        return self.handle.write(data)


class ArtifactStore:
    def __init__(self, store: ObjectStore) -> None:
        self.store = store

    @classmethod
    async def open(cls, js: JetStreamContext, replicas: int = 1) -> ArtifactStore:
        """The store, its bucket created with ``replicas`` copies when it does not exist yet."""
        return cls(await ensure_artifacts_bucket(js, replicas=replicas))

    async def variant(self, name: str, provider: Provider) -> PublishedVariant | None:
        """The published ``provider`` variant of artifact ``name``; None when there is none, or it is unreadable."""
        data = await self._read(variant_object(name, provider))
        if data is None:
            return None
        try:
            return msgspec.json.decode(data, type=PublishedVariant)
        except (msgspec.DecodeError, ValueError) as exc:
            log.warning("ignoring the published %s variant of %s: %s", provider, name, exc)
            return None

    async def alias(self, key: str) -> str | None:
        """The name of the artifact that source key ``key`` was prepared as, if a host published one."""
        data = await self._read(alias_object(key))
        if data is None:
            return None
        try:
            alias = msgspec.json.decode(data, type=SourceAlias)
        except (msgspec.DecodeError, ValueError) as exc:
            log.warning("ignoring the published alias of %s: %s", key, exc)
            return None
        return alias.name if alias.key == key else None

    async def publish(self, directory: Path, variant: PublishedVariant) -> int:
        """Publish the variant in ``directory``: each file not stored yet, then its manifest (last: a manifest
        is published only once all its files are). Returns the bytes uploaded (0 when all were there)."""
        sent = 0
        for entry in variant.files:
            name = blob_object(entry.sha256)
            if await self._size(name) == entry.bytes:
                continue
            with (directory / entry.path).open("rb") as handle:
                meta = ObjectMeta(
                    name=name,
                    description=f"{entry.path} of {variant.name} ({variant.provider})",
                    options=ObjectMetaOptions(max_chunk_size=CHUNK_BYTES),
                )
                info = await self.store.put(name, handle, meta=meta)
            if info.size != entry.bytes:
                raise OSError(f"{directory / entry.path} changed while it was published ({info.size} bytes sent)")
            sent += entry.bytes
        await self.store.put(variant_object(variant.name, variant.provider), msgspec.json.encode(variant))
        return sent

    async def publish_alias(self, alias: SourceAlias) -> None:
        """Say which artifact a source key names (after its variants are published)."""
        await self.store.put(alias_object(alias.key), msgspec.json.encode(alias))

    async def download(self, variant: PublishedVariant, into: Path) -> None:
        """Write every file of ``variant`` into directory ``into``, each checked against the manifest as it
        streams; :class:`ArtifactRefused` at the first that differs or is missing from the store, TimeoutError
        when one stalls (below ``MIN_FETCH_BYTES_PER_S``)."""
        for entry in variant.files:
            with (into / entry.path).open("wb") as handle:
                writer = _HashingWriter(handle)
                try:
                    async with asyncio.timeout(FETCH_GRACE_S + entry.bytes / MIN_FETCH_BYTES_PER_S):
                        await self.store.get(blob_object(entry.sha256), writeinto=writer)  # type: ignore[arg-type]
                except ObjectNotFoundError:
                    raise ArtifactRefused(f"{entry.path} of {variant.name} is not in the object store") from None
                except DigestMismatchError:
                    raise ArtifactRefused(
                        f"{entry.path} of {variant.name} arrived corrupt (its chunks' digest)"
                    ) from None
            problem = file_problem(entry, writer.digest.hexdigest(), writer.size)
            if problem is not None:
                raise ArtifactRefused(problem)

    async def _read(self, name: str) -> bytes | None:
        try:
            result = await self.store.get(name)
        except ObjectNotFoundError:
            return None
        return bytes(result.data or b"")

    async def _size(self, name: str) -> int | None:
        try:
            info = await self.store.get_info(name)
        except ObjectNotFoundError:
            return None
        return info.size
