"""The provisioned Grafana dashboard (deploy/grafana/dashboards/nrt.json) and the families the code defines.

Every metric a panel queries must be a family some NRT service exports (``nrt.adapters.metrics``), and
every family must be on the dashboard.
"""

from __future__ import annotations

import json
import re

from nrt.adapters.metrics import defined_families
from paths import ROOT

DASHBOARD = ROOT / "deploy" / "grafana" / "dashboards" / "nrt.json"
SERIES_SUFFIXES = ("_total", "_bucket", "_count", "_sum")  # the series names of counter and histogram families


def queried() -> set[str]:
    """The metric names in the dashboard's panel queries."""
    dashboard = json.loads(DASHBOARD.read_text())
    exprs = [target["expr"] for panel in dashboard["panels"] for target in panel.get("targets", [])]
    assert exprs, "the dashboard has no queries"
    return {name for expr in exprs for name in re.findall(r"\bnrt_[a-z0-9_]+", expr)}


def family_of(series: str, families: frozenset[str]) -> str | None:
    if series in families:
        return series
    for suffix in SERIES_SUFFIXES:
        if series.endswith(suffix) and series.removesuffix(suffix) in families:
            return series.removesuffix(suffix)
    return None


def test_every_metric_on_the_dashboard_is_a_family_the_code_defines() -> None:
    families = defined_families()
    unknown = sorted(name for name in queried() if family_of(name, families) is None)
    assert not unknown, f"the dashboard queries metrics no service exports: {unknown}"


def test_the_dashboard_covers_every_family() -> None:
    families = defined_families()
    shown = {family_of(name, families) for name in queried()}
    assert families - shown == set(), f"families missing from the dashboard: {sorted(families - shown)}"


def test_a_misspelt_metric_is_caught() -> None:
    assert family_of("nrt_request_duration_seconds_bucket", defined_families()) == "nrt_request_duration_seconds"
    assert family_of("nrt_requests_total", defined_families()) == "nrt_requests"
    assert family_of("nrt_request_latency_seconds_bucket", defined_families()) is None
