"""Build, find and check artifacts: the I/O half of the catalogue.

``prepare(name)`` returns the cached artifact when it is present, verifies and was built by
the current recipe; otherwise it builds it in a staging directory under a per-name lock and
renames it into place. Each variant (the root ``cpu`` one, ``cuda/``) has its own record
and state; a build makes only the requested variants that are not ready. ``ensure_artifact(source)`` does the same for any resolved source
that has something to prepare (catalogue names and local directories).
"""

from __future__ import annotations

import contextlib
from collections.abc import Collection
from pathlib import Path
from typing import Literal

import msgspec

from nrt.adapters.catalogue.catalogue import get_entry
from nrt.adapters.catalogue.entry import BuildContext, CatalogueEntry, Variant
from nrt.adapters.catalogue.layout import artifact_dir, build_lock, install, install_variant, staging_dir
from nrt.adapters.catalogue.local import describe_local
from nrt.adapters.catalogue.progress import NoProgress, Progress
from nrt.adapters.catalogue.record import (
    ArtifactRecord,
    Provider,
    RecordError,
    load_record,
    save_record,
    verify,
    with_files,
)
from nrt.adapters.catalogue.sources import CatalogueSource, LocalSource
from nrt.adapters.catalogue.variants import ROOT_PROVIDER, default_providers, variant_path, variant_subdir
from nrt.adapters.inference.artifact import RECORD_FILE
from nrt.adapters.inference.errors import ArtifactError

CHECKSUM_STEP = "Compute checksums and write the record"
INSTALL_STEP = "Install into the model cache"

State = Literal["missing", "ready", "stale", "invalid"]


class PreparedArtifact(msgspec.Struct, frozen=True):
    """A complete artifact on disk and its record."""

    directory: Path
    record: ArtifactRecord

    @property
    def model_path(self) -> Path:
        return self.directory / self.record.model

    @property
    def tokenizer_path(self) -> Path:
        return self.directory / self.record.tokenizer


class ArtifactStatus(msgspec.Struct, frozen=True):
    """Whether a variant of a catalogue model is prepared: ``ready``, ``missing``, ``stale`` (older recipe) or ``invalid``."""

    name: str
    state: State
    directory: Path
    provider: Provider = ROOT_PROVIDER
    record: ArtifactRecord | None = None
    problem: str | None = None


def prepare_steps(entry: CatalogueEntry, providers: Collection[Provider] = (ROOT_PROVIDER,)) -> tuple[str, ...]:
    """Every progress step ``prepare`` reports for a build of ``entry``'s ``providers`` variants, in order."""
    variant_steps = (step for variant in _variants(entry, providers) for step in variant.steps)
    return (*entry.steps, *variant_steps, CHECKSUM_STEP, INSTALL_STEP)


def status(
    name: str, *, provider: Provider = ROOT_PROVIDER, checksums: bool = False, entry: CatalogueEntry | None = None
) -> ArtifactStatus:
    """The state of the cached ``provider`` variant of catalogue model ``name`` (sizes only unless ``checksums``).

    A ``ValueError`` when the recipe has no variant for ``provider``. ``entry``: the recipe of a model
    outside the built-in catalogue (an operator's checkpoint, ``nrt.adapters.catalogue.checkpoints``).
    """
    entry = entry or get_entry(name)
    variant = entry.variant(provider)
    if variant is None:
        raise ValueError(
            f"{name} has no {provider} variant (its variants: {', '.join(v.provider for v in entry.variants)}); "
            f"its {ROOT_PROVIDER} artifact serves {provider} as it is"
        )
    directory = variant_path(artifact_dir(name), provider)

    def state(kind: State, record: ArtifactRecord | None = None, problem: str | None = None) -> ArtifactStatus:
        return ArtifactStatus(
            name=name, state=kind, directory=directory, provider=provider, record=record, problem=problem
        )

    if not (directory / RECORD_FILE).is_file():
        return state("missing")
    try:
        record = load_record(directory)
    except RecordError as exc:
        return state("invalid", problem=str(exc))
    if record.recipe != variant.recipe:
        return state("stale", record, f"built by recipe {record.recipe}, the catalogue now has {variant.recipe}")
    if record.provider != provider:
        return state("invalid", record, f"the record says it is built for {record.provider}, not {provider}")
    check = verify(directory, record, checksums=checksums)
    if not check.ok:
        return state("invalid", record, "; ".join(check.problems))
    return state("ready", record)


def statuses(name: str, *, checksums: bool = False) -> tuple[ArtifactStatus, ...]:
    """The state of every variant of catalogue model ``name``, the root one first."""
    return tuple(status(name, provider=variant.provider, checksums=checksums) for variant in get_entry(name).variants)


def find_prepared(
    name: str, *, provider: Provider = ROOT_PROVIDER, checksums: bool = False, entry: CatalogueEntry | None = None
) -> PreparedArtifact | None:
    """The ready ``provider`` variant of catalogue model ``name``, or None (never builds)."""
    current = status(name, provider=provider, checksums=checksums, entry=entry)
    if current.state != "ready" or current.record is None:
        return None
    return PreparedArtifact(directory=current.directory, record=current.record)


def find_serving(
    name: str, provider: Provider, *, checksums: bool = False, entry: CatalogueEntry | None = None
) -> PreparedArtifact | None:
    """What serves catalogue model ``name`` on ``provider``: the variant built for it when ready, else
    the root variant (it runs on any provider) when ready, else None (never builds)."""
    entry = entry or get_entry(name)
    own = entry.variant(provider)
    if own is not None and (ready := find_prepared(name, provider=provider, checksums=checksums, entry=entry)):
        return ready
    return find_prepared(name, checksums=checksums, entry=entry)


def prepare(
    name: str,
    *,
    providers: Collection[Provider] | None = None,
    force: bool = False,
    checksums: bool = True,
    progress: Progress | None = None,
    entry: CatalogueEntry | None = None,
) -> PreparedArtifact:
    """The artifact of catalogue model ``name`` (``entry``: the recipe of a model outside the built-in
    catalogue), its variants for ``providers`` built first when missing,
    stale, invalid or ``force``.

    ``providers`` defaults to :func:`default_providers` (the root ``cpu`` variant, and this host's
    when it differs); a provider the recipe has no variant for is served by the root, which is
    built instead. Returns the first requested variant in the entry's order (the root when
    requested). Existing variants are accepted after verifying their files (sha256 when
    ``checksums``); only the others are built, in one build that shares the export. Raises
    :class:`UnknownModelError` for names outside the catalogue and lets build failures
    propagate (nothing is installed then).
    """
    entry = entry or get_entry(name)
    wanted = tuple(variant.provider for variant in _variants(entry, providers or default_providers()))
    sink = progress or NoProgress()

    def missing() -> tuple[Provider, ...]:
        return tuple(
            p for p in wanted if force or find_prepared(name, provider=p, checksums=checksums, entry=entry) is None
        )

    if not missing():
        return _found(name, wanted[0], entry)
    with build_lock(name):
        # another process may have finished the same build while we waited for the lock
        todo = missing()
        if not todo:
            return _found(name, wanted[0], entry)
        with staging_dir(name) as staging, staging_dir(name) as work:
            context = BuildContext(staging=staging, work=work, progress=sink, providers=todo)
            records = entry.build(context)
            sink.step(CHECKSUM_STEP)
            if tuple(record.provider for record in records) != todo:
                raise ArtifactError(
                    f"the {name} builder returned variants for {[r.provider for r in records]}, asked for {list(todo)}"
                )
            for record in records:
                directory = variant_path(staging, record.provider)
                save_record(directory, with_files(record, directory))
            sink.step(INSTALL_STEP)
            if ROOT_PROVIDER in todo:
                others = tuple(variant_subdir(v.provider) for v in entry.variants if v.provider != ROOT_PROVIDER)
                install(staging, name, keep=others)
            else:
                for provider in todo:
                    install_variant(variant_path(staging, provider), name, variant_subdir(provider))
    return _found(name, wanted[0], entry)


def _variants(entry: CatalogueEntry, providers: Collection[Provider]) -> tuple[Variant, ...]:
    """The entry's variants that serve ``providers``, in the entry's order."""
    serving = {entry.serving(provider).provider for provider in providers}
    return tuple(variant for variant in entry.variants if variant.provider in serving)


def _found(name: str, provider: Provider, entry: CatalogueEntry) -> PreparedArtifact:
    ready = find_prepared(name, provider=provider, entry=entry)
    if ready is None:  # installed a moment ago: only a concurrent deletion gets here
        raise ArtifactError(f"the {provider} variant of {name} vanished right after it was installed")
    return ready


def prepare_local(path: Path, *, checksums: bool = True) -> PreparedArtifact:
    """The artifact in local directory ``path``; writes its ``nrt-artifact.json`` when missing or outdated.

    The record is saved into the directory when it is writable; otherwise the artifact is
    returned with an in-memory record.
    """
    directory = path.expanduser().resolve()
    if not directory.is_dir():
        hint = ""
        try:
            get_entry(str(path))
            hint = f"; did you mean catalogue://{path}?"
        except KeyError:
            pass
        raise ArtifactError(f"local model directory {directory} does not exist{hint}")
    try:
        record = load_record(directory)
    except RecordError:
        record = None
    if record is not None and verify(directory, record, checksums=checksums).ok:
        return PreparedArtifact(directory=directory, record=record)
    record = with_files(describe_local(directory), directory)
    with contextlib.suppress(OSError):  # a read-only directory: the record lives in memory only
        save_record(directory, record)
    return PreparedArtifact(directory=directory, record=record)


def ensure_artifact(
    source: CatalogueSource | LocalSource, *, checksums: bool = False, progress: Progress | None = None
) -> PreparedArtifact:
    """Prepare what a resolved source names (a remote source has nothing to prepare)."""
    if isinstance(source, CatalogueSource):
        return prepare(source.name, checksums=checksums, progress=progress)
    return prepare_local(Path(source.path), checksums=checksums)
