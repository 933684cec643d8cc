"""Build, find and check artifacts: the I/O half of the catalogue.

``prepare(name)`` returns the cached artifact when it is present, verifies and was built by
the current recipe; otherwise it builds it in a staging directory under a per-name lock and
renames it into place. ``ensure_artifact(source)`` does the same for any resolved source
that has something to prepare (catalogue names and local directories).
"""

from __future__ import annotations

import contextlib
from pathlib import Path
from typing import Literal

import msgspec

from nrt.catalogue.catalogue import get_entry
from nrt.catalogue.entry import BuildContext, CatalogueEntry
from nrt.catalogue.layout import artifact_dir, build_lock, install, staging_dir
from nrt.catalogue.local import describe_local
from nrt.catalogue.progress import NoProgress, Progress
from nrt.catalogue.record import ArtifactRecord, RecordError, load_record, save_record, verify, with_files
from nrt.catalogue.sources import CatalogueSource, LocalSource
from nrt.inference.artifact import RECORD_FILE
from nrt.inference.errors import ArtifactError

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
    """Whether a catalogue model is prepared: ``ready``, ``missing``, ``stale`` (older recipe) or ``invalid``."""

    name: str
    state: State
    directory: Path
    record: ArtifactRecord | None = None
    problem: str | None = None


def prepare_steps(entry: CatalogueEntry) -> tuple[str, ...]:
    """Every progress step ``prepare`` reports for a build of ``entry``, in order."""
    return (*entry.steps, CHECKSUM_STEP, INSTALL_STEP)


def status(name: str, *, checksums: bool = False) -> ArtifactStatus:
    """The state of the cached artifact of catalogue model ``name`` (sizes only unless ``checksums``)."""
    entry = get_entry(name)
    directory = artifact_dir(name)
    if not (directory / RECORD_FILE).is_file():
        return ArtifactStatus(name=name, state="missing", directory=directory)
    try:
        record = load_record(directory)
    except RecordError as exc:
        return ArtifactStatus(name=name, state="invalid", directory=directory, problem=str(exc))
    if record.recipe != entry.recipe:
        problem = f"built by recipe {record.recipe}, the catalogue now has {entry.recipe}"
        return ArtifactStatus(name=name, state="stale", directory=directory, record=record, problem=problem)
    check = verify(directory, record, checksums=checksums)
    if not check.ok:
        return ArtifactStatus(
            name=name, state="invalid", directory=directory, record=record, problem="; ".join(check.problems)
        )
    return ArtifactStatus(name=name, state="ready", directory=directory, record=record)


def find_prepared(name: str, *, checksums: bool = False) -> PreparedArtifact | None:
    """The ready artifact of catalogue model ``name``, or None (never builds)."""
    current = status(name, checksums=checksums)
    if current.state != "ready" or current.record is None:
        return None
    return PreparedArtifact(directory=current.directory, record=current.record)


def prepare(
    name: str, *, force: bool = False, checksums: bool = True, progress: Progress | None = None
) -> PreparedArtifact:
    """The artifact of catalogue model ``name``, built first when missing, stale, invalid or ``force``.

    An existing artifact is accepted after verifying its files (sha256 when ``checksums``).
    Raises :class:`UnknownModelError` for names outside the catalogue and lets build
    failures propagate (nothing is installed then).
    """
    entry = get_entry(name)
    sink = progress or NoProgress()
    if not force and (ready := find_prepared(name, checksums=checksums)) is not None:
        return ready
    with build_lock(name):
        # another process may have finished the same build while we waited for the lock
        if not force and (ready := find_prepared(name, checksums=checksums)) is not None:
            return ready
        with staging_dir(name) as staging, staging_dir(name) as work:
            record = entry.build(BuildContext(staging=staging, work=work, progress=sink))
            sink.step(CHECKSUM_STEP)
            record = with_files(record, staging)
            save_record(staging, record)
            sink.step(INSTALL_STEP)
            directory = install(staging, name)
    return PreparedArtifact(directory=directory, record=record)


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
