"""The cluster as ``nrt status --watch`` draws it: one rich renderable from a ``/v1/cluster`` answer.

Pure: the state (JSON, as the gateway answers it) in, tables out. The same picture as the
dashboard at ``/ui``: workers and the models on each with tier and bytes against the manifest's
budgets, the manifest version, a drain with its in-flight count, each model's last load failure,
sessions, and what the router chose.
"""

from __future__ import annotations

from datetime import UTC, datetime
from typing import Any

from rich.console import Group, RenderableType
from rich.table import Table
from rich.text import Text

from nrt.core.manifest import ManifestError, parse_manifest
from nrt.core.units import format_size

TIER_STYLE = {"resident": "bold green", "standby": "yellow", "remote": "blue", "unloaded": "dim"}


def budgets(manifest_text: str | None) -> dict[str, int | None]:
    """The manifest's byte budgets per tier (None: no budget, or no manifest that parses)."""
    none: dict[str, int | None] = {"resident": None, "standby": None}
    if manifest_text is None:
        return none
    try:
        resources = parse_manifest(manifest_text, "manifest in force").resources
    except ManifestError:
        return none
    return {"resident": resources.gpu_budget, "standby": resources.ram_budget}


def _age(iso: str, now: datetime) -> str:
    seconds = max(0.0, (now - datetime.fromisoformat(iso)).total_seconds())
    return f"{seconds:.0f}s" if seconds < 90 else f"{seconds / 60:.0f}m" if seconds < 5400 else f"{seconds / 3600:.1f}h"


def _header(state: dict[str, Any], source: str | None, now: datetime) -> Text:
    header = Text()
    header.append(f"cluster {state.get('cluster') or '(no manifest yet)'}", style="bold")
    header.append(f"  manifest v{state.get('manifest_version', 0)}")
    if state.get("draining"):
        in_flight = len(state.get("in_flight", {}))
        header.append(f"  DRAINING to v{state.get('drain_to_version')}: {in_flight} in flight", style="bold red")
    header.append(f"  state from {source or '?'}  at {now.strftime('%H:%M:%S')}", style="dim")
    return header


def _workers(state: dict[str, Any]) -> tuple[Table, dict[str, int]]:
    table = Table(title="workers and their models", title_justify="left", expand=True)
    for name, justify in (
        ("worker", "left"),
        ("role", "left"),
        ("device", "left"),
        ("state", "left"),
        ("model", "left"),
    ):
        table.add_column(name, justify=justify)  # type: ignore[arg-type]
    table.add_column("tier")
    table.add_column("held", justify="right")
    held = {"resident": 0, "standby": 0}
    by_worker: dict[str, list[tuple[str, dict[str, Any]]]] = {}
    for model in state.get("models", {}).values():
        for worker_id, placement in model.get("placements", {}).items():
            by_worker.setdefault(worker_id, []).append((model["model_id"], placement))
            if placement["tier"] in held:
                held[placement["tier"]] += int(placement.get("bytes_held", 0))
    for worker_id, worker in sorted(state.get("workers", {}).items()):
        alive = "up" if worker.get("alive", True) else "lost"
        models = sorted(by_worker.get(worker_id, []), key=lambda m: m[0]) or [("-", {"tier": "-", "bytes_held": 0})]
        for model_id, placement in models:
            tier = placement["tier"]
            table.add_row(
                worker_id,
                worker.get("role", ""),
                device_label(worker.get("device")),
                alive,
                model_id,
                Text(tier, style=TIER_STYLE.get(tier, "")),
                format_size(int(placement.get("bytes_held", 0))),
            )
    return table, held


def device_label(device: dict[str, Any] | None) -> str:
    """What a worker runs its models on: ``cpu``, or ``cuda``, the GPU's name and memory ("" when not said)."""
    if not device:
        return ""
    kind = str(device.get("kind", ""))
    if kind != "cuda":
        return kind
    name = f" {device['name']}" if device.get("name") else ""
    return f"cuda{name} ({format_size(int(device.get('total_bytes', 0)))})"


def _budget_line(held: dict[str, int], manifest_text: str | None) -> Text:
    limits = budgets(manifest_text)
    parts = [
        f"{tier} {format_size(held[tier])} of {key} {format_size(limit) if limit is not None else '(none)'}"
        for tier, key in (("resident", "gpu_budget"), ("standby", "ram_budget"))
        for limit in [limits[tier]]
    ]
    return Text("; ".join(parts), style="dim")


def _sessions(state: dict[str, Any], now: datetime) -> Table:
    table = Table(title="sessions", title_justify="left", expand=True)
    for name in ("session", "model", "worker"):
        table.add_column(name)
    for name in ("age", "turns", "KV"):
        table.add_column(name, justify="right")
    sessions = sorted(state.get("sessions", {}).values(), key=lambda s: s["last_used_at"], reverse=True)
    for s in sessions:
        kv = "evicted" if s.get("kv_evicted") else format_size(int(s.get("kv_bytes", 0)))
        table.add_row(s["session_id"], s["model_id"], s["worker_id"], _age(s["opened_at"], now), str(s["turns"]), kv)
    return table


def _requests(state: dict[str, Any]) -> Text:
    counters = state.get("counters", {})
    requests = ", ".join(f"{k.removeprefix('requests_')} {v}" for k, v in counters.items() if k.startswith("requests_"))
    intents = ", ".join(f"{k} {v}" for k, v in sorted(state.get("intents", {}).items())) or "none yet"
    return Text(f"requests {requests}; in flight {len(state.get('in_flight', {}))}\nrouted by intent: {intents}")


def last_failures(state: dict[str, Any]) -> list[dict[str, Any]]:
    """Each model's last standing load failure (from its ``load_failures``), the latest first: the
    failure's fields (``worker_id``, ``error``, ``at``) and the ``model_id``."""
    found = []
    for model in state.get("models", {}).values():
        failures = list((model.get("load_failures") or {}).values())
        if failures:
            last = max(failures, key=lambda f: datetime.fromisoformat(f["at"]))
            found.append({**last, "model_id": model["model_id"]})
    return sorted(found, key=lambda f: datetime.fromisoformat(f["at"]), reverse=True)


def failure_line(failure: dict[str, Any], now: datetime) -> str:
    """One load failure as ``nrt status`` prints it: model, worker, how long ago, why."""
    reason = failure.get("error") or "no reason recorded"
    return f"{failure['model_id']} on {failure['worker_id']}, {_age(failure['at'], now)} ago: {reason}"


def _failures(state: dict[str, Any], now: datetime) -> Table | Text:
    failures = last_failures(state)
    if not failures:
        return Text("")
    table = Table(title="load failures (the last per model)", title_justify="left", expand=True)
    for name in ("model", "worker", "ago", "reason"):
        table.add_column(name, justify="right" if name == "ago" else "left")
    for f in failures:
        reason = f.get("error") or "no reason recorded"
        table.add_row(f["model_id"], f["worker_id"], _age(f["at"], now), Text(reason, style="red"))
    return table


def status_view(state: dict[str, Any], source: str | None = None, now: datetime | None = None) -> RenderableType:
    """The whole picture of ``state`` (a ``/v1/cluster`` answer)."""
    now = now or datetime.now(UTC)
    workers, held = _workers(state)
    return Group(
        _header(state, source, now),
        workers,
        _budget_line(held, state.get("manifest_text")),
        _failures(state, now),
        _sessions(state, now),
        _requests(state),
    )
