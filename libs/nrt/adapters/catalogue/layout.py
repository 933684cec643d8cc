"""Where artifacts live on disk, and how they get there atomically.

An artifact is one directory, ``models_dir()/<name>``, holding ``model.onnx`` (its weights in
``model.onnx_data`` beside it when over 2 GB), ``tokenizer.json``, ``config.json`` and ``nrt-artifact.json``: the
root (``cpu``) variant. Variants for other providers are complete artifacts in
subdirectories named after the provider (``cuda/``, see :mod:`nrt.adapters.catalogue.variants`),
installed with the root or on their own. A build happens in a staging directory beside it and is renamed into place only when
complete (the record is written last), so a crashed build never leaves a directory that
looks like a valid artifact. Builds of one name are serialised by a lock file.
"""

from __future__ import annotations

import contextlib
import fcntl
import os
import shutil
import tempfile
import uuid
from collections.abc import Iterator
from pathlib import Path

from nrt.adapters import settings

_STAGING_PREFIX = ".staging-"
_TRASH_PREFIX = ".trash-"


def artifact_dir(name: str) -> Path:
    """The cache directory of the artifact called ``name`` (it may not exist)."""
    return settings.models_dir() / name


@contextlib.contextmanager
def build_lock(name: str) -> Iterator[None]:
    """Hold an exclusive lock for building ``name``; clears leftovers of crashed builds."""
    root = settings.models_dir()
    root.mkdir(parents=True, exist_ok=True)
    with (root / f".{name}.lock").open("a+b") as handle:
        fcntl.flock(handle.fileno(), fcntl.LOCK_EX)
        try:
            _remove_leftovers(root, name)
            yield
        finally:
            fcntl.flock(handle.fileno(), fcntl.LOCK_UN)


@contextlib.contextmanager
def staging_dir(name: str) -> Iterator[Path]:
    """A fresh empty directory beside the artifact's; removed on exit unless installed."""
    root = settings.models_dir()
    root.mkdir(parents=True, exist_ok=True)
    path = Path(tempfile.mkdtemp(prefix=f"{_STAGING_PREFIX}{name}.", dir=root))
    try:
        yield path
    finally:
        shutil.rmtree(path, ignore_errors=True)


def install(staged: Path, name: str, keep: tuple[str, ...] = ()) -> Path:
    """Move a complete staged artifact into place, replacing any previous one.

    ``keep``: subdirectories (other variants) of the previous artifact that the staged one
    lacks and that move over into the new one rather than being thrown away.
    """
    target = artifact_dir(name)
    staged.chmod(0o755)  # mkdtemp made it private
    if target.exists():
        for subdir in keep:
            if (target / subdir).is_dir() and not (staged / subdir).exists():
                (target / subdir).rename(staged / subdir)
        trash = target.with_name(f"{_TRASH_PREFIX}{name}.{uuid.uuid4().hex[:8]}")
        target.rename(trash)
        shutil.rmtree(trash, ignore_errors=True)
    staged.rename(target)
    _fsync_dir(target.parent)
    return target


def install_variant(staged: Path, name: str, subdir: str) -> Path:
    """Move a complete staged variant into ``artifact_dir(name)/subdir``, replacing any previous one
    (the root variant and the others stay as they are)."""
    root = artifact_dir(name)
    root.mkdir(parents=True, exist_ok=True)
    target = root / subdir
    staged.chmod(0o755)
    if target.exists():
        trash = root.with_name(f"{_TRASH_PREFIX}{name}.{uuid.uuid4().hex[:8]}")
        target.rename(trash)
        shutil.rmtree(trash, ignore_errors=True)
    staged.rename(target)
    _fsync_dir(root)
    return target


def _remove_leftovers(root: Path, name: str) -> None:
    for prefix in (_STAGING_PREFIX, _TRASH_PREFIX):
        for path in root.glob(f"{prefix}{name}.*"):
            shutil.rmtree(path, ignore_errors=True)


def _fsync_dir(path: Path) -> None:
    fd = os.open(path, os.O_RDONLY)
    try:
        os.fsync(fd)
    finally:
        os.close(fd)
