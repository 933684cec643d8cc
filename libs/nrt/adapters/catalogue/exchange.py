"""The disk side of sharing prepared artifacts over the bus: describe a variant for publishing, and
install a fetched one atomically (a staging directory renamed into place under the artifact's build lock).

The bus side is :mod:`nrt.adapters.bus.artifact_store`; what is published and whether to fetch is
:mod:`nrt.adapters.catalogue.published`.
"""

from __future__ import annotations

from pathlib import Path

from nrt.adapters.catalogue.checkpoints import LABEL_FILE
from nrt.adapters.catalogue.layout import artifact_dir, install, install_variant
from nrt.adapters.catalogue.published import PublishedVariant, safe_file_name, variant_manifest
from nrt.adapters.catalogue.record import FileEntry, Provider, RecordError, describe_files, load_record, verify
from nrt.adapters.catalogue.variants import PROVIDERS, ROOT_PROVIDER, variant_path, variant_subdir
from nrt.adapters.inference.errors import ArtifactError

LOCAL_ONLY = frozenset({LABEL_FILE})  # the name its operator gave a model on this host: not the artifact's


def variant_files(directory: Path) -> tuple[FileEntry, ...]:
    """Every file of the variant in ``directory`` (its subdirectories are other variants), with sha256 and size.

    The files the record lists take the record's sha256 (computed when it was built, and verified by size
    here); the others (the record itself, the tokenizer's companions) are hashed now. A fetching host
    checks every byte against these, so a file damaged here is refused there, never installed."""
    record = load_record(directory)
    check = verify(directory, record, checksums=False)
    if not check.ok:
        raise ArtifactError(f"{directory} does not match its record: {'; '.join(check.problems)}")
    listed = {entry.path: entry for entry in record.files}
    names = sorted(
        path.name
        for path in directory.iterdir()
        if path.is_file() and safe_file_name(path.name) and path.name not in LOCAL_ONLY
    )
    hashed = {entry.path: entry for entry in describe_files(directory, tuple(n for n in names if n not in listed))}
    return tuple(listed.get(name) or hashed[name] for name in names)


def describe_variant(name: str, provider: Provider) -> PublishedVariant | None:
    """The manifest of the ready ``provider`` variant of artifact ``name`` on this host, or None when there is none."""
    directory = variant_path(artifact_dir(name), provider)
    try:
        record = load_record(directory)
        files = variant_files(directory)
    except (RecordError, ArtifactError, OSError):
        return None
    return variant_manifest(name, provider, record.source, record.recipe, files)


def local_digests(name: str, providers: tuple[Provider, ...] = PROVIDERS) -> dict[Provider, str]:
    """The digest of each ready variant of artifact ``name`` on this host, by provider."""
    found = {provider: describe_variant(name, provider) for provider in providers}
    return {provider: variant.digest for provider, variant in found.items() if variant is not None}


def install_fetched(staged: Path, variant: PublishedVariant) -> Path:
    """Move the fetched, verified ``variant`` in ``staged`` into place (the caller holds the build lock):
    the root variant replaces the artifact's root and keeps its other variants; another variant replaces
    only its subdirectory. Returns the variant's directory."""
    for entry in variant.files:  # the download checked each file's sha256 as it streamed; here, that all arrived
        path = staged / entry.path
        if not path.is_file() or path.stat().st_size != entry.bytes:
            raise ArtifactError(f"the fetched {variant.provider} variant of {variant.name} lacks {entry.path} in full")
    if variant.provider == ROOT_PROVIDER:
        others = tuple(variant_subdir(p) for p in PROVIDERS if p != ROOT_PROVIDER)
        return install(staged, variant.name, keep=others)
    return install_variant(staged, variant.name, variant_subdir(variant.provider))
