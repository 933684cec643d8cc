"""A one-screen, human summary of a valid manifest."""

from __future__ import annotations

from typing import TYPE_CHECKING

from nrt.core.units import format_size
from nrt.core.vocabulary import DeviceRequirement

if TYPE_CHECKING:
    from nrt.core.manifest.model import Manifest, ModelSpec
    from nrt.core.manifest.parse import FootprintOf


def _budget(n: int | None) -> str:
    return format_size(n) if n is not None else "unlimited"


def summarize(manifest: Manifest, footprint_of: FootprintOf, warnings: list[str], threshold: str | None = None) -> str:
    """The summary; ``threshold`` describes the entry model's confidence floor (nrt.hosting.manifest_threshold)."""
    rule = manifest.routing.dispatch_rule
    lines = [
        f"cluster      {manifest.cluster}",
        f"budgets      gpu {_budget(manifest.resources.gpu_budget)}, ram {_budget(manifest.resources.ram_budget)}",
        f"entry        {manifest.routing.entry}",
        f"dispatch     {rule.render()}  ({'by intent' if rule.by_intent else 'fixed route'})",
        "",
        *_table([MODEL_COLUMNS, *(_model_row(spec, footprint_of) for spec in manifest.models)], RIGHT_ALIGNED),
        "",
    ]
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
    copies = [f"{s.id} x{s.replicas}" for s in manifest.models if s.replicas > 1]
    if copies:
        lines.append(f"replicas     {', '.join(copies)} (a session's turns stay on the worker holding its KV)")
    if rule.by_intent:
        margin = manifest.routing.sticky_margin
        lines.append(f"sticky       a conversation leaves its specialist when a new intent beats it by {margin:g}")
    lru = manifest.lru
    lines.append(
        f"session lru  idle {lru.idle_threshold:g}s, min lifetime {lru.min_lifetime:g}s, sweep {lru.sweep_interval:g}s"
    )
    lines.append(f"drain        timeout {manifest.drain.timeout:g}s, admission wait {manifest.drain.admission_wait:g}s")
    lines.extend(f"warning      {w}" for w in warnings)
    return "\n".join(lines)


MODEL_COLUMNS = ("model", "role", "tier", "priority", "footprint", "source")
RIGHT_ALIGNED = frozenset({"footprint"})
GAP = "  "  # between columns, however long their values


def _model_row(spec: ModelSpec, footprint_of: FootprintOf) -> tuple[str, ...]:
    size = spec.footprint if spec.footprint is not None else footprint_of(spec.source)
    shown = format_size(size) if size is not None else "?"
    return (spec.id, spec.role.value, spec.tier.value, spec.priority.value, shown, spec.source)


def _table(rows: list[tuple[str, ...]], right_aligned: frozenset[str]) -> list[str]:
    """``rows`` (the first: the column names) as lines, each column as wide as its longest value."""
    widths = [max(len(row[i]) for row in rows) for i in range(len(rows[0]))]
    right = [name in right_aligned for name in rows[0]]
    return [
        GAP.join(
            cell.rjust(width) if align_right else cell.ljust(width)
            for cell, width, align_right in zip(row, widths, right, strict=True)
        ).rstrip()
        for row in rows
    ]
