"""The README's table of who may do what on the bus is the one the permissions are made from."""

from __future__ import annotations

from pathlib import Path

from nrt.adapters.bus.auth import permission_table, permissions
from nrt.adapters.bus.contract import SERVICES


def test_the_readme_shows_the_permissions_the_server_config_gets(repo_root: Path) -> None:
    readme = (repo_root / "README.md").read_text(encoding="utf-8")
    assert permission_table() in readme, (
        "README is stale: paste `python -m nrt.adapters.bus.auth` into 'Security: the bus'"
    )


def test_only_the_gateway_routes_only_cluster_state_commands_and_each_service_publishes_its_own_events() -> None:
    publishers = {identity: set(permissions(identity).publish) for identity in SERVICES}
    assert [i for i, p in publishers.items() if "nrt.route" in p] == ["api_gateway"]
    assert [i for i, p in publishers.items() if "nrt.control.*" in p] == ["cluster_state"]
    for identity, published in publishers.items():
        events = {s for s in published if s.startswith("nrt.events.")}
        assert events <= {f"nrt.events.{identity}.*"}, (identity, events)
