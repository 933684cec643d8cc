"""docker-compose.yml and the Dockerfile: structure, and the same install step as the README."""

from __future__ import annotations

import re
import tomllib

import pytest
import yaml

from deploy_files import compose_file, image_tags, readers
from deploy_files import dockerfile_stages as _stages
from deploy_files import instructions as _instructions
from paths import ROOT
from settings_env import clean_environment
from specialist_worker.settings import WorkerSettings

__all__ = ["clean_environment"]  # the autouse fixture: no variable of the table set by the shell running the tests

SERVICES = ("cluster_state", "specialist_worker", "router_svc", "api_gateway")


def _compose() -> dict:  # type: ignore[type-arg]
    return yaml.safe_load((ROOT / "docker-compose.yml").read_text())


def test_compose_has_infrastructure_with_health_checks() -> None:
    services = _compose()["services"]
    for name in ("nats", "postgres", "jaeger"):
        assert "image" in services[name], name
        assert services[name]["healthcheck"]["test"], name
    assert "-js" in services["nats"]["command"]
    assert "127.0.0.1:${NRT_PUBLISH_OTLP_PORT:-4318}:4318" in services["jaeger"]["ports"]  # OTLP over HTTP
    assert services["jaeger"]["environment"]["COLLECTOR_OTLP_ENABLED"] == "true"
    # the first start's init server answers on its Unix socket only: health is asked over TCP
    assert services["postgres"]["healthcheck"]["test"][1:4] == ["pg_isready", "-h", "127.0.0.1"]


def test_every_port_is_published_on_the_loopback_only_and_each_host_port_can_be_chosen() -> None:
    for name, service in _compose()["services"].items():
        for port in service.get("ports", []):
            published = re.fullmatch(r"(\$\{[^}]+\}|[0-9.]+):(\$\{[^}]+\}):(\d+)", port)
            assert published is not None, (name, port)
            address, host_port, container_port = published.groups()
            assert address in ("127.0.0.1", "${NRT_PUBLISH_ADDRESS:-127.0.0.1}"), (name, port)
            assert re.fullmatch(rf"\$\{{NRT_PUBLISH_[A-Z]+_PORT:-{container_port}\}}", host_port), (name, port)


def test_jaeger_and_grafana_are_the_observability_profile_and_traces_go_there_only_when_asked() -> None:
    services = _compose()["services"]
    assert services["jaeger"]["profiles"] == services["grafana"]["profiles"] == ["observability"]
    assert services["api_gateway"]["environment"]["OTEL_EXPORTER_OTLP_ENDPOINT"] == "${NRT_OTLP_ENDPOINT:-}"
    setup = (ROOT / "scripts" / "compose-setup").read_text()
    assert 'echo "COMPOSE_PROFILES=observability"' in setup
    assert 'echo "NRT_OTLP_ENDPOINT=http://jaeger:4318"' in setup


def test_every_service_builds_from_the_one_dockerfile_and_is_wired() -> None:
    services = _compose()["services"]
    for name in SERVICES:
        service = services[name]
        assert service["build"] == {"context": ".", "target": "runtime"}, name  # the CPU image
        assert service["command"][-1] == name or name in " ".join(service["command"]), name
        env = service["environment"]
        assert env["NRT_NATS_URL"] == "nats://nats:4222", name
        assert env["NRT_DATABASE_URL"].startswith("postgresql://"), name
        assert env["OTEL_EXPORTER_OTLP_ENDPOINT"] == "${NRT_OTLP_ENDPOINT:-}", name
        assert "outbox:/var/lib/nrt/outbox" in service["volumes"], name  # unacknowledged events survive a restart
        assert not any(v.startswith("models:") for v in service["volumes"]), name  # the models are in the image
        assert service["healthcheck"]["test"], name
    assert services["api_gateway"]["ports"] == [
        "${NRT_PUBLISH_ADDRESS:-127.0.0.1}:${NRT_PUBLISH_GATEWAY_PORT:-8080}:8080"
    ]
    assert "outbox" in _compose()["volumes"]


def test_start_order_follows_health() -> None:
    services = _compose()["services"]
    assert services["cluster_state"]["depends_on"]["nats"]["condition"] == "service_healthy"
    assert services["cluster_state"]["depends_on"]["migrate"]["condition"] == "service_completed_successfully"
    assert set(services["cluster_state"]["depends_on"]) == {"nats", "migrate"}  # no model preparation at start
    assert services["migrate"]["depends_on"]["postgres"]["condition"] == "service_healthy"
    for name in ("specialist_worker", "router_svc"):
        assert services[name]["depends_on"]["cluster_state"]["condition"] == "service_healthy"
    assert set(services["api_gateway"]["depends_on"]) == {"router_svc", "specialist_worker"}


def _runs(body: str) -> list[str]:
    return _instructions(body, "RUN")


def _env(body: str) -> dict[str, str]:
    pairs = re.findall(r'([A-Z_]+)=("[^"]*"|\S+)', " ".join(_instructions(body, "ENV")))
    return {key: value.strip('"') for key, value in pairs}


def test_dockerfile_installs_exactly_as_the_readme_does() -> None:
    stages = _stages()
    # the CPU stages first: the classic builder builds every stage before its target
    assert list(stages) == ["build", "runtime", "build-cuda", "runtime-cuda"]
    for name in ("build", "runtime-cuda", "runtime"):
        installs = [run for run in _runs(stages[name][1]) if "pip" in run or "bootstrap" in run]
        # every Python install is the README's install step: its dependencies first (a layer the code's
        # changes leave cached), then NRT itself once the code is copied
        assert installs == ["NRT_DEPENDENCIES_ONLY=1 scripts/bootstrap", "scripts/bootstrap"], name
        copies = _instructions(stages[name][1], "COPY")
        dependencies = copies.index("scripts/bootstrap /app/scripts/bootstrap")
        assert all(not c.startswith(("libs", "services", "README")) for c in copies[: dependencies + 1]), name
    readme = (ROOT / "README.md").read_text()
    assert "./scripts/up" in readme
    assert "./scripts/test" in readme
    for script in ("up", "test"):
        assert "scripts/bootstrap" in (ROOT / "scripts" / script).read_text()
    copies = {name: _instructions(stages[name][1], "COPY") for name in ("build", "runtime", "runtime-cuda")}
    assert copies["runtime"][:7] == copies["runtime-cuda"][:7] == copies["build"]  # the same files everywhere
    for copied in (
        "pyproject.toml",
        "requirements.lock",
        "libs",
        "services",
        "migrations",
        "manifests",
        "scripts/bootstrap",
    ):
        assert any(copied in c for c in copies["build"]), copied


def test_the_runtime_images_carry_the_prepared_models_and_no_build_or_dev_tools() -> None:
    stages = _stages()
    build_base, build = stages["build"]
    assert build_base.startswith("python:3.11-")
    assert "NRT_EXTRAS" not in _env(build)  # the build stage installs dev and export (torch, transformers, pytest)
    assert "download.pytorch.org" in _env(build)["PIP_EXTRA_INDEX_URL"]
    assert ".venv/bin/nrt models prepare minilm-l6 && .venv/bin/nrt models prepare gemma3-270m" in _runs(build)
    build_cuda_base, build_cuda = stages["build-cuda"]
    assert build_cuda_base == "build"  # the same install and models, plus the CUDA variants
    assert _runs(build_cuda) == [".venv/bin/nrt models prepare gemma3-270m --provider cuda"]
    for name, models_from in (("runtime", "build"), ("runtime-cuda", "build-cuda")):
        body = stages[name][1]
        env = _env(body)
        assert env["NRT_EXTRAS"] == "", name  # the runtime dependencies alone
        assert env["NRT_HOME"] == _env(build)["NRT_HOME"] == "/var/lib/nrt", name
        assert [c for c in _instructions(body, "COPY") if "--from=build" in c] == [
            f"--from={models_from} /var/lib/nrt/models /var/lib/nrt/models"
        ], name  # only the converted models come from a build stage
        assert "torch" not in body, name
        assert "PIP_EXTRA_INDEX_URL" not in env, name
        assert re.search(r"^USER nrt$", body, re.MULTILINE), name  # not root
        assert (
            'HEALTHCHECK --interval=10s --timeout=15s --start-period=30s --retries=10 CMD ["nrt-healthcheck"]' in body
        )
        for arg in ("PIP_FIND_LINKS", "PIP_NO_INDEX"):  # an air-gapped build's wheelhouse, unset by default
            assert f"ARG {arg}\n" in body, name
    assert "NRT_GPU" not in _env(stages["runtime"][1])  # the CPU build of ONNX Runtime
    cuda_base, cuda = stages["runtime-cuda"]
    assert _env(cuda)["NRT_GPU"] == "1"  # onnxruntime-gpu and nvidia-ml-py instead
    # onnxruntime-gpu 1.31's wheels are built against CUDA 13 and cuDNN 9 (their [cuda] extra asks for
    # nvidia-cuda-runtime~=13.0, [cudnn] for nvidia-cudnn-cu13~=9.0): the base image brings those
    assert re.fullmatch(r"nvidia/cuda:13\.\d+\.\d+-cudnn-runtime-ubuntu24\.04", cuda_base), cuda_base
    assert "python3-venv" in " ".join(_runs(cuda))  # Ubuntu 24.04's Python 3.12, within requires-python


def test_the_gpu_profile_runs_a_worker_on_the_cuda_image_with_a_gpu_reserved() -> None:
    services = _compose()["services"]
    gpu = services["specialist_worker_gpu"]
    assert gpu["profiles"] == ["gpu"]  # only with `docker compose --profile gpu`
    assert gpu["build"] == {"context": ".", "target": "runtime-cuda"}
    assert gpu["image"] != services["specialist_worker"]["image"]
    assert gpu["command"] == services["specialist_worker"]["command"]
    [device] = gpu["deploy"]["resources"]["reservations"]["devices"]
    assert device == {"driver": "nvidia", "count": 1, "capabilities": ["gpu"]}
    assert gpu["depends_on"]["cluster_state"]["condition"] == "service_healthy"
    assert gpu["healthcheck"]["test"][-2:] == ["health", "specialist_worker"]
    assert "outbox:/var/lib/nrt/outbox" in gpu["volumes"]
    for name, service in services.items():  # without the profile nothing else changes or asks for a GPU
        if name != "specialist_worker_gpu":
            assert service.get("profiles", ["observability"]) == ["observability"], name
            assert "deploy" not in service, name


def test_one_onnxruntime_build_is_installed_cpu_by_default_gpu_on_request() -> None:
    project = tomllib.loads((ROOT / "pyproject.toml").read_text())["project"]
    assert not [d for d in project["dependencies"] if d.startswith("onnxruntime")]  # the extras choose the build
    extras = project["optional-dependencies"]
    [cpu] = extras["cpu"]
    gpu = dict(requirement.split("==") for requirement in extras["gpu"])
    assert cpu.split("==") == ["onnxruntime", gpu["onnxruntime-gpu"]]  # the same ONNX Runtime version
    assert "nvidia-ml-py" in gpu  # measures the GPU memory residents hold
    lock = dict(line.split("==") for line in (ROOT / "requirements.lock").read_text().split())
    assert lock["onnxruntime"] == lock["onnxruntime-gpu"] == gpu["onnxruntime-gpu"]
    assert lock["nvidia-ml-py"] == gpu["nvidia-ml-py"]
    bootstrap = (ROOT / "scripts" / "bootstrap").read_text()
    assert (
        'if [ "${NRT_GPU:-0}" = 1 ]; then\n  runtime=gpu unwanted=onnxruntime\nelse\n  runtime=cpu unwanted=onnxruntime-gpu\n'
        in bootstrap
    )
    assert 'extras="${NRT_EXTRAS-dev,export}"' in bootstrap
    assert '-e ".[${runtime}${extras:+,$extras}]"' in bootstrap
    assert "NRT_GPU=1 ./scripts/bootstrap" in (ROOT / "README.md").read_text()


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


# -- deploy/compose/worker.yml: a worker alone, joining a cluster from another host ---------------------------------

WORKER_COMPOSE = ROOT / "deploy" / "compose" / "worker.yml"


def _substituted(value: str) -> str:
    """A compose value with its ``${VAR:-default}`` as the default and ``${VAR:?why}`` as a sample value."""
    value = re.sub(r"\$\{NRT_NATS_URL:\?[^}]*\}", "nats://nats.example.com:4222", value)
    value = re.sub(r"\$\{[A-Z_]+:-([^}]*)\}", r"\1", value)
    assert "${" not in value, value  # every other variable has a default
    return value


def test_the_worker_compose_file_runs_a_worker_alone_on_each_image() -> None:
    services = compose_file(WORKER_COMPOSE)["services"]
    assert set(services) == {"specialist_worker", "specialist_worker_gpu"}
    main = _compose()["services"]
    tags = image_tags()
    assert (WORKER_COMPOSE.parent / services["specialist_worker"]["build"]["context"]).resolve() == ROOT
    for name, service in services.items():
        # the same image, command and health check as the single-host stack's worker of that device
        assert service["build"] == {"context": "../..", "target": main[name]["build"]["target"]}, name
        assert service["image"] == main[name]["image"] == tags[service["build"]["target"]], name
        assert service["command"] == main[name]["command"] == ["python", "-m", "specialist_worker"], name
        assert service["healthcheck"]["test"] == main[name]["healthcheck"]["test"], name
        assert "depends_on" not in service, name  # the cluster runs elsewhere
        assert service["read_only"] is True, name
        assert service["tmpfs"] == ["/tmp"], name
    assert "profiles" not in services["specialist_worker"]
    gpu = services["specialist_worker_gpu"]
    assert gpu["profiles"] == ["gpu"]
    assert gpu["deploy"] == main["specialist_worker_gpu"]["deploy"]  # one GPU reserved, as in docker-compose.yml


def test_the_worker_compose_file_reads_only_settings_a_worker_has_and_needs_nats_alone(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    read_by = readers()
    for name, service in compose_file(WORKER_COMPOSE)["services"].items():
        env = service["environment"]
        for variable in env:
            if variable.startswith(("NRT_", "OTEL_")):
                assert "specialist_worker" in read_by.get(variable, set()), (name, variable)
        assert "NRT_DATABASE_URL" not in env, name  # a worker never reaches PostgreSQL
        assert env["NRT_NATS_URL"].startswith("${NRT_NATS_URL:?"), name  # no default: the cluster's NATS, given
        # its own seed, from a folder mounted read-only that holds it alone
        [bus] = service["volumes"]
        source, target, mode = bus.rsplit(":", 2)
        assert source.startswith("${NRT_BUS_DIR:?"), name
        assert mode == "ro", name
        assert env["NRT_NATS_NKEY_SEED_FILE"] == f"{target}/specialist_worker.nk", name
        # the values, defaults taken, are ones the worker's settings accept
        with monkeypatch.context() as patched:
            for variable, value in env.items():
                patched.setenv(variable, _substituted(str(value)))
            settings = WorkerSettings.from_env()
        assert settings.nats_url == "nats://nats.example.com:4222", name
        assert settings.metrics_port == 9464, name
        [port] = service["ports"]
        published = re.fullmatch(
            r"\$\{NRT_PUBLISH_ADDRESS:-127\.0\.0\.1\}:\$\{NRT_PUBLISH_[A-Z_]+_PORT:-(\d+)\}:(\d+)", port
        )
        assert published is not None, (name, port)  # on the loopback unless asked, each host port a variable
        assert int(published[2]) == settings.metrics_port, name


def test_the_readme_shows_the_worker_compose_file_as_its_header_does() -> None:
    header = WORKER_COMPOSE.read_text().split("\nx-worker:", 1)[0]
    readme = (ROOT / "README.md").read_text()
    for command in (
        "docker compose -f deploy/compose/worker.yml up -d",
        "docker compose -f deploy/compose/worker.yml --profile gpu up -d specialist_worker_gpu",
        'sudo chown "$(id -u):10001" bus/specialist_worker.nk && chmod 0640 bus/specialist_worker.nk',
        "export NRT_NATS_URL=nats://nats.example.com:4222 NRT_BUS_DIR=$PWD/bus",
    ):
        assert command in header, command
        assert command in readme, command
