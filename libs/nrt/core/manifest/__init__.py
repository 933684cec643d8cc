"""The NRT manifest: parsing, validation and the typed model."""

from nrt.core.manifest.diff import ManifestChanges, diff_manifests
from nrt.core.manifest.dispatch import DispatchRule, parse_rule
from nrt.core.manifest.errors import ManifestError, Problem
from nrt.core.manifest.model import (
    Audit,
    DeviceRequirement,
    DrainPolicy,
    Generation,
    LruPolicy,
    Manifest,
    ModelSpec,
    Priority,
    Resources,
    Role,
    Routing,
    Tier,
    TurnTemplate,
    WeightFormat,
)
from nrt.core.manifest.parse import FootprintOf, load_manifest, parse_manifest

__all__ = [
    "Audit",
    "DeviceRequirement",
    "DispatchRule",
    "DrainPolicy",
    "FootprintOf",
    "Generation",
    "LruPolicy",
    "Manifest",
    "ManifestChanges",
    "ManifestError",
    "ModelSpec",
    "Priority",
    "Problem",
    "Resources",
    "Role",
    "Routing",
    "Tier",
    "TurnTemplate",
    "WeightFormat",
    "diff_manifests",
    "load_manifest",
    "parse_manifest",
    "parse_rule",
]
