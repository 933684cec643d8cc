"""What replacing one manifest with another changes in its models: the swap plans from it, ``nrt up`` shows it."""

from __future__ import annotations

from dataclasses import dataclass

from nrt.core.manifest.model import Manifest


@dataclass(frozen=True, slots=True)
class ManifestChanges:
    added: tuple[str, ...]  # new model ids
    removed: tuple[str, ...]  # ids the new manifest drops
    replaced: tuple[str, ...]  # same id, another source (or another weight format of it)
    retiered: tuple[str, ...]  # same id and source, another declared tier

    def summary(self) -> str:
        """One line: ``adds a, b; drops c; ...`` (or that no model changed)."""
        parts = [
            f"{what} {', '.join(ids)}"
            for what, ids in (
                ("adds", self.added),
                ("drops", self.removed),
                ("replaces the source of", self.replaced),
                ("changes the tier of", self.retiered),
            )
            if ids
        ]
        return "; ".join(parts) or "the same models (other settings changed)"


def diff_manifests(old: Manifest | None, new: Manifest) -> ManifestChanges:
    """The models ``new`` adds, drops, re-sources and re-tiers compared with ``old`` (None: nothing before)."""
    old_specs = {s.id: s for s in old.models} if old is not None else {}
    new_specs = {s.id: s for s in new.models}
    replaced = tuple(
        i
        for i in new_specs
        if i in old_specs
        and (old_specs[i].source, old_specs[i].quantization) != (new_specs[i].source, new_specs[i].quantization)
    )
    kept = [i for i in new_specs if i in old_specs and i not in replaced]
    return ManifestChanges(
        added=tuple(i for i in new_specs if i not in old_specs),
        removed=tuple(i for i in old_specs if i not in new_specs),
        replaced=replaced,
        retiered=tuple(sorted(i for i in kept if old_specs[i].tier is not new_specs[i].tier)),
    )
