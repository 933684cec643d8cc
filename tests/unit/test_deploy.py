"""docker-compose.yml and the Dockerfile: structure, and the same install step as the README."""

from __future__ import annotations

import re
from pathlib import Path

import yaml

ROOT = Path(__file__).resolve().parents[2]
SERVICES = ("cluster_state", "specialist_worker", "router_svc", "api_gateway")


def _compose() -> dict:  # type: ignore[type-arg]
    return yaml.safe_load((ROOT / "docker-compose.yml").read_text())


def test_compose_has_infrastructure_with_health_checks() -> None:
    services = _compose()["services"]
    for name in ("nats", "postgres", "jaeger"):
        assert "image" in services[name], name
        assert services[name]["healthcheck"]["test"], name
    assert "-js" in services["nats"]["command"]
    assert "4318:4318" in services["jaeger"]["ports"]  # OTLP over HTTP
    assert services["jaeger"]["environment"]["COLLECTOR_OTLP_ENABLED"] == "true"


def test_every_service_builds_from_the_one_dockerfile_and_is_wired() -> None:
    services = _compose()["services"]
    for name in SERVICES:
        service = services[name]
        assert service["build"] == ".", name
        assert service["command"][-1] == name or name in " ".join(service["command"]), name
        env = service["environment"]
        assert env["NRT_NATS_URL"] == "nats://nats:4222", name
        assert env["NRT_DATABASE_URL"].startswith("postgresql://"), name
        assert env["OTEL_EXPORTER_OTLP_ENDPOINT"] == "http://jaeger:4318", name
        assert "models:/var/lib/nrt" in service["volumes"], name  # the model cache is a volume
        assert service["healthcheck"]["test"], name
    assert services["api_gateway"]["ports"] == ["8080:8080"]
    assert "models" in _compose()["volumes"]


def test_start_order_follows_health() -> None:
    services = _compose()["services"]
    assert services["cluster_state"]["depends_on"]["nats"]["condition"] == "service_healthy"
    assert services["cluster_state"]["depends_on"]["migrate"]["condition"] == "service_completed_successfully"
    assert services["migrate"]["depends_on"]["postgres"]["condition"] == "service_healthy"
    for name in ("specialist_worker", "router_svc"):
        assert services[name]["depends_on"]["cluster_state"]["condition"] == "service_healthy"
    assert set(services["api_gateway"]["depends_on"]) == {"router_svc", "specialist_worker"}


def test_dockerfile_installs_exactly_as_the_readme_does() -> None:
    dockerfile = (ROOT / "Dockerfile").read_text()
    runs = re.findall(r"^RUN (.+)$", dockerfile, flags=re.MULTILINE)
    assert runs == ["scripts/bootstrap"]
    readme = (ROOT / "README.md").read_text()
    assert "./scripts/up" in readme
    assert "./scripts/test" in readme
    for script in ("up", "test"):
        assert "scripts/bootstrap" in (ROOT / "scripts" / script).read_text()
    for copied in ("pyproject.toml", "requirements.lock", "libs", "services", "migrations", "manifests", "scripts"):
        assert copied in dockerfile


def _prometheus_targets() -> dict[str, list[str]]:
    config = yaml.safe_load((ROOT / "deploy" / "prometheus" / "prometheus.yml").read_text())
    return {job["job_name"]: job["static_configs"][0]["targets"] for job in config["scrape_configs"]}


def test_compose_runs_prometheus_and_grafana_with_their_provisioning() -> None:
    services = _compose()["services"]
    prometheus, grafana = services["prometheus"], services["grafana"]
    assert prometheus["image"].startswith("prom/prometheus:")
    assert grafana["image"].startswith("grafana/grafana:")
    assert "./deploy/prometheus/prometheus.yml:/etc/prometheus/prometheus.yml:ro" in prometheus["volumes"]
    assert "./deploy/grafana/provisioning:/etc/grafana/provisioning:ro" in grafana["volumes"]
    assert "./deploy/grafana/dashboards:/var/lib/grafana/dashboards:ro" in grafana["volumes"]
    assert grafana["depends_on"]["prometheus"]["condition"] == "service_healthy"
    assert prometheus["healthcheck"]["test"]
    assert grafana["healthcheck"]["test"]
    for name in ("prometheus", "grafana"):
        assert name in _compose()["volumes"]
    # every mounted file or folder is in the repository
    for mount in prometheus["volumes"] + grafana["volumes"]:
        source = mount.split(":")[0]
        if source.startswith("./"):
            assert (ROOT / source).exists(), source
    datasource = yaml.safe_load((ROOT / "deploy/grafana/provisioning/datasources/prometheus.yml").read_text())
    assert datasource["datasources"][0]["url"] == "http://prometheus:9090"
    provider = yaml.safe_load((ROOT / "deploy/grafana/provisioning/dashboards/nrt.yml").read_text())
    assert provider["providers"][0]["options"]["path"] == "/var/lib/grafana/dashboards"


def test_prometheus_scrapes_every_service_on_its_metrics_port() -> None:
    services = _compose()["services"]
    targets = _prometheus_targets()
    assert set(targets) == set(SERVICES)
    assert targets["api_gateway"] == ["api_gateway:8080"]  # GET /metrics on the HTTP port
    for name in SERVICES:
        port = services[name]["environment"]["NRT_METRICS_PORT"]
        if name != "api_gateway":
            assert targets[name] == [f"{name}:{port}"], name
