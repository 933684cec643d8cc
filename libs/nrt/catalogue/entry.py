"""A catalogue entry: a named recipe that builds one artifact directory."""

from __future__ import annotations

import re
from collections.abc import Callable
from pathlib import Path

import msgspec

from nrt.catalogue.progress import Progress
from nrt.catalogue.record import ArtifactRecord, Kind

NAME_PATTERN = re.compile(r"^[a-z0-9][a-z0-9-]*$")


class BuildContext(msgspec.Struct, frozen=True):
    """What a builder gets: the directory to fill, a scratch directory, and a progress sink."""

    staging: Path  # becomes the artifact directory; the builder writes model.onnx, tokenizer.json, config.json
    work: Path  # scratch space, deleted after the build
    progress: Progress


Builder = Callable[[BuildContext], ArtifactRecord]


class CatalogueEntry(msgspec.Struct, frozen=True):
    """One built-in model. ``build`` returns the record (files are filled in by ``prepare``)."""

    name: str
    kind: Kind
    recipe: str  # "<name>/<version>": a new version makes existing artifacts stale
    description: str
    approx_bytes: int  # size of the prepared artifact, for listings before it is built
    steps: tuple[str, ...]  # the builder's progress steps, in order
    build: Builder

    def __post_init__(self) -> None:
        if not NAME_PATTERN.match(self.name):
            raise ValueError(f"catalogue name {self.name!r} must be lowercase letters, digits and dashes")
