"""What a prepared artifact looks like on the bus, and whether a worker fetches it or prepares it: pure.

A host that prepares an artifact publishes each variant it built to the cluster's object store
(``nrt.adapters.bus.artifact_store``): every file of the variant directory as a blob named by its
sha256, and a :class:`PublishedVariant` (the artifact's name, the variant, the record's provenance
and recipe, and every file with its sha256 and size) under the artifact's name and variant. The
source string a manifest names it by points at that name through a :class:`SourceAlias`, so a host
that cannot resolve the source itself (no Hub, an empty Hugging Face cache) still finds what the
cluster prepared. A fetched file is installed only when its sha256 and size are the manifest's.
"""

from __future__ import annotations

import hashlib
from collections.abc import Mapping
from dataclasses import dataclass

import msgspec

from nrt.adapters.catalogue.record import FileEntry, Provider
from nrt.adapters.catalogue.variants import ROOT_PROVIDER

BLOB_PREFIX = "sha256/"  # a file's bytes, named by their sha256: the same file is stored once
VARIANT_PREFIX = "artifacts/"  # artifacts/<name>/<provider>: a PublishedVariant
ALIAS_PREFIX = "sources/"  # sources/<sha256 of the source key>: a SourceAlias
_HEX = frozenset("0123456789abcdef")


class PublishedVariant(msgspec.Struct, frozen=True, kw_only=True, forbid_unknown_fields=True):
    """One variant of a prepared artifact as the cluster's object store holds it: the manifest of its files."""

    name: str  # the artifact's name under models_dir(): content-addressed for an operator's checkpoint
    provider: Provider  # the variant (its directory: the artifact's root for cpu, cuda/ for cuda)
    source: str  # the record's provenance, pinned (hf://org/name@<commit>, ...)
    recipe: str  # the recipe that built it: a host whose recipe differs prepares its own
    files: tuple[FileEntry, ...]  # every file of the variant directory, the record (nrt-artifact.json) among them
    digest: str  # digest_of(files): the variant's content address

    def __post_init__(self) -> None:
        if not self.files:
            raise ValueError(f"the published {self.provider} variant of {self.name} lists no files")
        for entry in self.files:
            if not safe_file_name(entry.path):
                raise ValueError(f"the published {self.name} lists {entry.path!r}, which is not a plain file name")
            if not is_sha256(entry.sha256) or entry.bytes < 0:
                raise ValueError(f"the published {self.name} gives {entry.path} an invalid sha256 or size")
        if self.digest != digest_of(self.files):
            raise ValueError(f"the published {self.provider} variant of {self.name} does not match its digest")

    @property
    def total_bytes(self) -> int:
        return sum(entry.bytes for entry in self.files)


class SourceAlias(msgspec.Struct, frozen=True, kw_only=True, forbid_unknown_fields=True):
    """Which artifact a manifest's source (and weight format) names, as the host that prepared it resolved it."""

    key: str  # source_key(source, weights)
    name: str


def digest_of(files: tuple[FileEntry, ...]) -> str:
    """The sha256 over the files' names, sizes and sha256s, in name order: equal digests, equal bytes."""
    lines = "".join(f"{entry.path}\0{entry.bytes}\0{entry.sha256}\n" for entry in sorted(files, key=lambda e: e.path))
    return hashlib.sha256(lines.encode()).hexdigest()


def variant_manifest(
    name: str, provider: Provider, source: str, recipe: str, files: tuple[FileEntry, ...]
) -> PublishedVariant:
    return PublishedVariant(
        name=name, provider=provider, source=source, recipe=recipe, files=files, digest=digest_of(files)
    )


def source_key(source: str, weights: str | None) -> str:
    """What a source string names with the manifest's ``quantization`` (the same repository at int4 is
    another artifact)."""
    return source.strip() if weights is None else f"{source.strip()}#{weights}"


def blob_object(sha256: str) -> str:
    return BLOB_PREFIX + sha256


def variant_object(name: str, provider: Provider) -> str:
    return f"{VARIANT_PREFIX}{name}/{provider}"


def alias_object(key: str) -> str:
    return ALIAS_PREFIX + hashlib.sha256(key.encode()).hexdigest()


def is_sha256(text: str) -> bool:
    return len(text) == 64 and set(text) <= _HEX


def safe_file_name(path: str) -> bool:
    """A file directly in the variant directory: no directories, no hidden names, nothing that climbs."""
    return bool(path) and "/" not in path and "\\" not in path and not path.startswith(".") and path != ".."


def file_problem(entry: FileEntry, sha256: str, size: int) -> str | None:
    """Why the fetched bytes of ``entry`` must not be installed, or None when they are what was published."""
    if size != entry.bytes:
        return f"{entry.path} has {size} bytes, the published manifest says {entry.bytes}"
    if sha256 != entry.sha256:
        return f"{entry.path} has sha256 {sha256[:16]}..., the published manifest says {entry.sha256[:16]}..."
    return None


# -- fetch, or prepare ---------------------------------------------------------------------------


@dataclass(frozen=True, slots=True)
class UseLocal:
    """This host already holds the published variant (same digest): load it, nothing to move."""

    variant: PublishedVariant


@dataclass(frozen=True, slots=True)
class Fetch:
    """Fetch this variant from the object store, verify it, install it."""

    variant: PublishedVariant


@dataclass(frozen=True, slots=True)
class Prepare:
    """Nothing usable is published: prepare it here (or fail as before), for this reason."""

    reason: str


Decision = UseLocal | Fetch | Prepare


def decide(
    provider: Provider,
    published: Mapping[Provider, PublishedVariant],
    local_digests: Mapping[Provider, str],
    recipes: Mapping[Provider, str] | None = None,
) -> Decision:
    """What a worker serving ``provider`` does with what the cluster has ``published`` of an artifact.

    The variant built for ``provider`` is preferred, else the root (cpu) one, which runs anywhere.
    ``local_digests``: the digests of the variants ready on this host. ``recipes``: the recipe this
    host would build each variant with, when it knows it (a published variant built by another
    recipe is not used: this host prepares its own); None when the source cannot be resolved here,
    and whatever the cluster prepared is taken."""
    skipped: list[str] = []
    for candidate in dict.fromkeys((provider, ROOT_PROVIDER)):
        variant = published.get(candidate)
        if variant is None:
            continue
        expected = recipes.get(candidate) if recipes is not None else None
        if recipes is not None and variant.recipe != expected:
            skipped.append(f"its {candidate} variant was built by recipe {variant.recipe}, this host's is {expected}")
            continue
        if local_digests.get(candidate) == variant.digest:
            return UseLocal(variant)
        return Fetch(variant)
    if skipped:
        return Prepare("; ".join(skipped))
    return Prepare("the cluster has published no variant of it that serves " + provider)
