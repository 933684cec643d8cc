"""A catalogue entry: a named recipe that builds an artifact directory, one variant per provider."""

from __future__ import annotations

import re
from collections.abc import Callable
from pathlib import Path

import msgspec

from nrt.adapters.catalogue.progress import Progress
from nrt.adapters.catalogue.record import ArtifactRecord, Kind, Provider, Quantization
from nrt.adapters.catalogue.variants import ROOT_PROVIDER, variant_path

NAME_PATTERN = re.compile(r"^[a-z0-9][a-z0-9-]*$")


class Variant(msgspec.Struct, frozen=True):
    """One artifact a recipe builds for one execution provider."""

    provider: Provider
    quantization: Quantization  # how its weights are stored (the record's field of the same name)
    recipe: str  # "<name>/<version>" (+ the variant's conversion): a new one makes built variants stale
    steps: tuple[str, ...]  # the builder's progress steps for this variant, after the entry's shared ones
    approx_bytes: int  # size of the built variant, for listings before it is built


class BuildContext(msgspec.Struct, frozen=True):
    """What a builder gets: the directory to fill, a scratch directory, a progress sink, the variants to build."""

    staging: Path  # becomes the artifact directory; each variant goes to ``directory(provider)``
    work: Path  # scratch space, deleted after the build
    progress: Progress
    providers: tuple[Provider, ...] = (ROOT_PROVIDER,)  # in the entry's variant order

    def directory(self, provider: Provider) -> Path:
        """The staging directory of the ``provider`` variant (created): model.onnx, tokenizer.json, config.json."""
        path = variant_path(self.staging, provider)
        path.mkdir(parents=True, exist_ok=True)
        return path


# Builds every variant in ``context.providers`` and returns their records in that order
# (``files`` are filled in by ``prepare``).
Builder = Callable[[BuildContext], tuple[ArtifactRecord, ...]]


class CatalogueEntry(msgspec.Struct, frozen=True):
    """One built-in model: shared build steps, then one or more variants (the root ``cpu`` one first)."""

    name: str
    kind: Kind
    description: str
    steps: tuple[str, ...]  # the builder's shared progress steps (every build), in order
    variants: tuple[Variant, ...]
    build: Builder

    def __post_init__(self) -> None:
        if not NAME_PATTERN.match(self.name):
            raise ValueError(f"catalogue name {self.name!r} must be lowercase letters, digits and dashes")
        if not self.variants or self.variants[0].provider != ROOT_PROVIDER:
            raise ValueError(f"catalogue entry {self.name!r}: its first variant must be the {ROOT_PROVIDER} one")
        if len({variant.provider for variant in self.variants}) != len(self.variants):
            raise ValueError(f"catalogue entry {self.name!r} has two variants for one provider")

    @property
    def root(self) -> Variant:
        return self.variants[0]

    @property
    def recipe(self) -> str:
        """The root variant's recipe."""
        return self.root.recipe

    @property
    def approx_bytes(self) -> int:
        """The root variant's approximate size."""
        return self.root.approx_bytes

    def variant(self, provider: Provider) -> Variant | None:
        return next((variant for variant in self.variants if variant.provider == provider), None)

    def serving(self, provider: Provider) -> Variant:
        """The variant that serves ``provider``: its own when the recipe has one, else the root."""
        return self.variant(provider) or self.root
