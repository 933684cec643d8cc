"""deploy/compose/nats-cluster.yml: three NATS servers routed into one cluster over docker-compose.yml, and every
NRT service of docker-compose.yml given the three of them."""

from __future__ import annotations

from typing import Any
from urllib.parse import urlparse

from deploy_files import compose_file
from nrt.adapters.bus.replication import cluster_size, default_replicas
from nrt.adapters.bus.servers import parse_servers
from nrt.adapters.settings import Settings
from paths import ROOT

CLUSTER = ROOT / "deploy" / "compose" / "nats-cluster.yml"
ROUTE_PORT = 6222


def _option(command: list[str], name: str) -> str:
    assert command.count(name) == 1, (name, command)
    return command[command.index(name) + 1]


def _servers() -> dict[str, dict[str, Any]]:
    services: dict[str, dict[str, Any]] = compose_file(CLUSTER)["services"]
    return {name: service for name, service in services.items() if name == "nats" or name.startswith("nats-")}


def test_three_servers_with_jetstream_routed_into_one_cluster() -> None:
    servers = _servers()
    base = compose_file(ROOT / "docker-compose.yml")["services"]["nats"]
    assert sorted(servers) == ["nats", "nats-2", "nats-3"]
    routes = {f"nats://{name}:{ROUTE_PORT}" for name in servers}
    names = set()
    for name, server in servers.items():
        command = server["command"]
        assert "-js" in command, name
        assert _option(command, "-sd") == "/data", name
        assert _option(command, "-c") == "/etc/nrt-bus/nats-server.conf", name  # NRT's users and permissions
        assert _option(command, "--cluster_name") == "nrt", name
        assert _option(command, "--cluster") == f"nats://0.0.0.0:{ROUTE_PORT}", name
        assert set(_option(command, "--routes").split(",")) == routes, name
        assert server["image"] == base["image"], name  # the same release as the single server
        assert "healthz" in " ".join(server["healthcheck"]["test"]), name
        names.add(_option(command, "--server_name"))
        volumes = server.get("volumes", base["volumes"])  # `nats` keeps docker-compose.yml's store and config
        assert any(v.endswith(":/data") for v in volumes), name
        assert "${NRT_BUS_DIR:-./bus}/nats-server.conf:/etc/nrt-bus/nats-server.conf:ro" in volumes, name
    assert len(names) == 3  # JetStream in a cluster needs a name per server
    stores = {v.split(":")[0] for s in ("nats-2", "nats-3") for v in servers[s]["volumes"] if v.endswith(":/data")}
    assert stores == {"nats-2", "nats-3"}
    assert set(compose_file(CLUSTER)["volumes"]) == stores


def test_every_service_that_reads_nats_gets_the_three_servers_and_keeps_three_copies() -> None:
    base = compose_file(ROOT / "docker-compose.yml")["services"]
    override = compose_file(CLUSTER)["services"]
    readers = [name for name, service in base.items() if "NRT_NATS_URL" in service.get("environment", {})]
    assert {"cluster_state", "specialist_worker", "router_svc", "api_gateway"} <= set(readers)
    servers = {f"{name}:4222" for name in _servers()}
    for name in readers:
        url = override[name]["environment"]["NRT_NATS_URL"]
        listed = parse_servers(url)
        assert {s.removeprefix("nats://") for s in listed} == servers, name
        assert Settings(nats_url=url).nats_servers == listed
    listed = Settings(nats_url=override["api_gateway"]["environment"]["NRT_NATS_URL"]).nats_servers
    assert default_replicas(cluster_size([urlparse(s) for s in listed])) == 3
    # cluster_state, which creates the stream, starts once every server is up
    assert set(override["cluster_state"]["depends_on"]) == {"nats-2", "nats-3"}
