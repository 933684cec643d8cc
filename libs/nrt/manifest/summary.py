"""A one-screen, human summary of a valid manifest."""

from __future__ import annotations

from typing import TYPE_CHECKING

from nrt.units import format_size
from nrt.vocabulary import DeviceRequirement

if TYPE_CHECKING:
    from nrt.manifest.model import Manifest, ModelSpec
    from nrt.manifest.parse import FootprintOf


def _budget(n: int | None) -> str:
    return format_size(n) if n is not None else "unlimited"


def summarize(manifest: Manifest, footprint_of: FootprintOf, warnings: list[str], threshold: str | None = None) -> str:
    """The summary; ``threshold`` describes the entry model's confidence floor (nrt.manifest_threshold)."""
    rule = manifest.routing.dispatch_rule
    lines = [
        f"cluster      {manifest.cluster}",
        f"budgets      gpu {_budget(manifest.resources.gpu_budget)}, ram {_budget(manifest.resources.ram_budget)}",
        f"entry        {manifest.routing.entry}",
        f"dispatch     {rule.render()}  ({'by intent' if rule.by_intent else 'fixed route'})",
        "",
        f"{'model':<14}{'role':<11}{'tier':<9}{'priority':<9}{'footprint':>10}  source",
    ]
    for spec in manifest.models:
        lines.append(_model_line(spec, footprint_of))
    lines.append("")
    routes = ", ".join(f"{label} -> {manifest.dispatch_target(label)}" for label in manifest.intent_labels)
    lines.append(f"intents      {routes}")
    lines.append(f"unknown      -> {manifest.dispatch_target(None)}")
    if threshold is not None:
        lines.append(f"threshold    {threshold}")
    warm = [f"{s.id} on {s.co_activation}" for s in manifest.models if s.co_activation]
    if warm:
        lines.append(f"co-activate  {', '.join(warm)}")
    devices = [f"{s.id} on {s.device.value}" for s in manifest.models if s.device is not DeviceRequirement.ANY]
    if devices:
        lines.append(f"devices      {', '.join(devices)} (placed only on workers with that device)")
    lru = manifest.lru
    lines.append(
        f"session lru  idle {lru.idle_threshold:g}s, min lifetime {lru.min_lifetime:g}s, sweep {lru.sweep_interval:g}s"
    )
    lines.append(f"drain        timeout {manifest.drain.timeout:g}s, admission wait {manifest.drain.admission_wait:g}s")
    lines.extend(f"warning      {w}" for w in warnings)
    return "\n".join(lines)


def _model_line(spec: ModelSpec, footprint_of: FootprintOf) -> str:
    size = spec.footprint if spec.footprint is not None else footprint_of(spec.source)
    shown = format_size(size) if size is not None else "?"
    return f"{spec.id:<14}{spec.role.value:<11}{spec.tier.value:<9}{spec.priority.value:<9}{shown:>10}  {spec.source}"
