"""deploy/kubernetes: every object valid against the Kubernetes API's schemas (offline, strict), and consistent
with NRT itself: the services and their commands, the images the Dockerfile builds, the settings each process
reads, the health routes and subjects, the secrets, the volumes each process writes to, the disruption budgets."""

from __future__ import annotations

import copy
import re
from typing import Any

import kubernetes_validate  # type: ignore[import-untyped]  # no py.typed
import pytest
import yaml
from tools import settings_doc

from deploy_files import (
    KUBERNETES,
    dockerfile_stages,
    documents,
    env_file,
    image_tags,
    instructions,
    kubernetes_resources,
    kustomization,
    readers,
)
from nrt.adapters.bus.contract import SERVICES as BUS_IDENTITIES
from nrt.adapters.settings import Settings, SettingsError
from nrt.core.manifest.parse import parse_manifest
from nrt.entrypoints.cli.main import cli
from paths import ROOT
from settings_env import clean_environment

__all__ = ["clean_environment"]  # the autouse fixture: no variable of the table set by the shell running the tests

KUBERNETES_VERSION = "1.33.0"  # the schemas checked against (kubernetes-validate carries them, offline)
SERVICES = ("api_gateway", "router_svc", "cluster_state")  # one Deployment each
WORKERS = {"specialist-worker": "runtime", "specialist-worker-gpu": "runtime-cuda"}  # a StatefulSet per device kind
WORKLOAD_KINDS = ("Deployment", "StatefulSet", "Job")
NRT_UID = 10001


def _of_kind(kind: str) -> dict[str, dict[str, Any]]:
    return {doc["metadata"]["name"]: doc for doc in kubernetes_resources() if doc["kind"] == kind}


def _workloads() -> dict[str, dict[str, Any]]:
    return {doc["metadata"]["name"]: doc for doc in kubernetes_resources() if doc["kind"] in WORKLOAD_KINDS}


def _pod(workload: dict[str, Any]) -> dict[str, Any]:
    spec: dict[str, Any] = workload["spec"]["template"]["spec"]
    return spec


def _container(workload: dict[str, Any]) -> dict[str, Any]:
    containers: list[dict[str, Any]] = _pod(workload)["containers"]
    [container] = containers
    return container


def _process(container: dict[str, Any]) -> str:
    """The NRT process a container runs: ``python -m SERVICE``, or the ``nrt`` CLI."""
    command = container["command"]
    if command[:2] == ["python", "-m"]:
        return str(command[2])
    assert command[0] == "nrt", command
    return "nrt"


def _generated_config_maps() -> dict[str, dict[str, str]]:
    """The ConfigMaps the kustomization's generators make: name -> data."""
    made = {}
    for generator in kustomization()["configMapGenerator"]:
        data: dict[str, str] = {}
        for env in generator.get("envs", []):
            data |= env_file(KUBERNETES / env)
        for file in generator.get("files", []):
            key, _, source = file.rpartition("=") if "=" in file else (file, "", file)
            data[key] = (KUBERNETES / source).read_text()
        made[generator["name"]] = data
    return made


def _environment(container: dict[str, Any]) -> dict[str, str | None]:
    """A container's variables: name -> literal value (None: from a Secret)."""
    config_maps = _generated_config_maps()
    found: dict[str, str | None] = {}
    for source in container.get("envFrom", []):
        found |= config_maps[source["configMapRef"]["name"]]
    for variable in container.get("env", []):
        found[variable["name"]] = variable.get("value")
    return found


def _example_secrets() -> dict[str, dict[str, str]]:
    return {doc["metadata"]["name"]: doc["stringData"] for doc in documents(KUBERNETES / "secrets.example.yaml")}


# -- the schemas ----------------------------------------------------------------------------------------------------


def _invalid(doc: dict[str, Any]) -> str | None:
    try:
        kubernetes_validate.validate(doc, KUBERNETES_VERSION, strict=True)
    except kubernetes_validate.ValidationError as exc:
        return f"{doc['kind']}/{doc['metadata']['name']} at {'.'.join(map(str, exc.path))}: {exc.message}"
    return None


def test_every_object_is_valid_for_the_kubernetes_api_strictly() -> None:
    generated = [
        {"apiVersion": "v1", "kind": "ConfigMap", "metadata": {"name": name, "namespace": "nrt"}, "data": data}
        for name, data in _generated_config_maps().items()
    ]
    objects = kubernetes_resources() + documents(KUBERNETES / "secrets.example.yaml") + generated
    assert {doc["kind"] for doc in objects} >= {
        "Namespace",
        "ConfigMap",
        "Secret",
        "Deployment",
        "StatefulSet",
        "Job",
        "Service",
        "PodDisruptionBudget",
    }
    problems = [problem for doc in objects if (problem := _invalid(doc)) is not None]
    assert problems == []


def test_the_strict_schemas_refuse_an_unknown_field_and_a_wrong_type() -> None:
    gateway = _of_kind("Deployment")["api-gateway"]
    misspelt = copy.deepcopy(gateway)
    _container(misspelt)["readinessprobe"] = _container(misspelt).pop("readinessProbe")
    assert "'readinessprobe' was unexpected" in str(_invalid(misspelt))
    wrong = copy.deepcopy(gateway)
    _container(wrong)["ports"][0]["containerPort"] = "8080"
    assert "is not of type 'integer'" in str(_invalid(wrong))


# -- the layout -----------------------------------------------------------------------------------------------------


def test_the_kustomization_holds_every_file_and_one_namespace() -> None:
    layout = kustomization()
    assert layout["namespace"] == "nrt"
    [namespace] = _of_kind("Namespace").values()
    assert namespace["metadata"]["name"] == "nrt"
    labels = namespace["metadata"]["labels"]
    assert labels["pod-security.kubernetes.io/warn"] == labels["pod-security.kubernetes.io/audit"] == "restricted"
    listed = set(layout["resources"])
    generated_from = {
        file.rpartition("=")[2] for generator in layout["configMapGenerator"] for file in generator.get("files", [])
    } | {env for generator in layout["configMapGenerator"] for env in generator.get("envs", [])}
    # not applied by `kubectl apply -k`: the Secrets' templates, and the NATS chart's values
    apart = {"kustomization.yaml", "secrets.example.yaml", "nats-values.yaml"}
    assert {path.name for path in KUBERNETES.iterdir()} == listed | generated_from | apart
    for doc in kubernetes_resources():
        assert doc["metadata"].get("namespace", "nrt") == "nrt", doc["metadata"]["name"]
        assert re.fullmatch(r"[a-z0-9]([-a-z0-9]*[a-z0-9])?", doc["metadata"]["name"]), doc["metadata"]["name"]


def test_one_deployment_per_service_and_a_worker_statefulset_per_device_kind() -> None:
    deployments, statefulsets = _of_kind("Deployment"), _of_kind("StatefulSet")
    assert {_process(_container(d)) for d in deployments.values()} == set(SERVICES)
    for name, deployment in deployments.items():
        assert name == _process(_container(deployment)).replace("_", "-"), name
    assert set(statefulsets) == set(WORKERS)
    for statefulset in statefulsets.values():
        assert _container(statefulset)["command"] == ["python", "-m", "specialist_worker"]
    gateway, router = deployments["api-gateway"], deployments["router-svc"]
    assert gateway["spec"]["replicas"] >= 2
    assert router["spec"]["replicas"] >= 2
    # cluster_state: a leader and a standby (a lease and a fencing epoch make two safe); a rolling update starts
    # the new pod as a standby before an old one stops
    state = deployments["cluster-state"]
    assert state["spec"]["replicas"] == 2
    assert state["spec"]["strategy"] == {"type": "RollingUpdate", "rollingUpdate": {"maxSurge": 1, "maxUnavailable": 0}}
    [job] = _of_kind("Job").values()
    assert _container(job)["command"] == ["nrt", "db", "migrate"]
    assert _pod(job)["restartPolicy"] == "OnFailure"


def test_the_gpu_worker_takes_one_gpu_on_a_gpu_node_and_the_cpu_worker_none() -> None:
    statefulsets = _of_kind("StatefulSet")
    gpu, cpu = statefulsets["specialist-worker-gpu"], statefulsets["specialist-worker"]
    resources = _container(gpu)["resources"]
    assert resources["limits"]["nvidia.com/gpu"] == resources["requests"]["nvidia.com/gpu"] == "1"
    assert _pod(gpu)["nodeSelector"] == {"nvidia.com/gpu.present": "true"}
    assert {"key": "nvidia.com/gpu", "operator": "Exists", "effect": "NoSchedule"} in _pod(gpu)["tolerations"]
    assert "nvidia.com/gpu" not in str(cpu)
    assert "nodeSelector" not in _pod(cpu)


def test_the_images_are_the_dockerfile_targets() -> None:
    tags = image_tags()
    assert set(tags) == {"runtime", "runtime-cuda"}
    assert set(tags) <= set(dockerfile_stages())
    for name, workload in _workloads().items():
        target = WORKERS.get(name, "runtime")
        assert _container(workload)["image"] == tags[target], name
    # the compose file builds the same targets under the same names
    compose = yaml.safe_load((ROOT / "docker-compose.yml").read_text())["services"]
    for service in ("specialist_worker", "specialist_worker_gpu"):
        assert compose[service]["image"] == tags[compose[service]["build"]["target"]], service


# -- the pods: users, writable paths, resources ---------------------------------------------------------------------


def test_every_pod_runs_as_the_images_user_without_privileges_on_a_read_only_root() -> None:
    runtime = dockerfile_stages()["runtime"][1]
    assert f"useradd --system --uid {NRT_UID} --gid nrt" in " ".join(instructions(runtime, "RUN"))
    for name, workload in _workloads().items():
        pod = _pod(workload)
        assert pod["automountServiceAccountToken"] is False, name
        context = pod["securityContext"]
        assert context["runAsNonRoot"] is True, name
        assert context["runAsUser"] == context["runAsGroup"] == context["fsGroup"] == NRT_UID, name
        assert context["seccompProfile"] == {"type": "RuntimeDefault"}, name
        container = _container(workload)
        assert container["securityContext"] == {
            "allowPrivilegeEscalation": False,
            "readOnlyRootFilesystem": True,
            "capabilities": {"drop": ["ALL"]},
        }, name
        resources = container["resources"]
        assert {"cpu", "memory"} <= set(resources["requests"]), name
        assert {"cpu", "memory"} <= set(resources["limits"]), name
        mounts = {mount["mountPath"]: mount for mount in container.get("volumeMounts", [])}
        volumes = {volume["name"]: volume for volume in pod.get("volumes", [])}
        assert set(volumes) == {mount["name"] for mount in mounts.values()}, name
        assert "emptyDir" in volumes[mounts["/tmp"]["name"]], name  # the one scratch path every process may use


def _services_with_a_file_outbox() -> set[str]:
    """The services whose code opens an event outbox (``Outbox.open``): they need it on a writable volume."""
    return {
        path.relative_to(ROOT / "services").parts[0]
        for path in (ROOT / "services").rglob("*.py")
        if "Outbox.open(" in path.read_text()
    }


def test_the_outbox_is_writable_where_a_service_keeps_one() -> None:
    with_outbox = _services_with_a_file_outbox()
    assert with_outbox == {"api_gateway", "router_svc"}
    for name, workload in _workloads().items():
        container = _container(workload)
        home = _environment(container)["NRT_HOME"]
        assert home == "/var/lib/nrt", name  # the image's NRT_HOME, owned by nrt
        outbox = f"{home}/outbox"  # nrt.adapters.bus.outbox.Outbox.open(home, ...)
        mounts = {mount["mountPath"]: mount["name"] for mount in container.get("volumeMounts", [])}
        if _process(container) in with_outbox:
            [volume] = [v for v in _pod(workload)["volumes"] if v["name"] == mounts[outbox]]
            assert "emptyDir" in volume, name  # kept across container restarts; flushed when the pod stops
        else:
            assert outbox not in mounts, name


def test_workers_offer_less_memory_than_their_limit() -> None:
    """The worker reads the node's memory, not its container's limit: NRT_WORKER_RAM keeps placement inside it."""
    units = {"Gi": 2**30, "GB": 10**9}
    for name, statefulset in _of_kind("StatefulSet").items():
        container = _container(statefulset)
        offered = re.fullmatch(r"(\d+)(GB)", str(_environment(container)["NRT_WORKER_RAM"]))
        limit = re.fullmatch(r"(\d+)(Gi)", container["resources"]["limits"]["memory"])
        assert offered is not None, name
        assert limit is not None, name
        assert int(offered[1]) * units[offered[2]] < int(limit[1]) * units[limit[2]], name
        threads = int(str(_environment(container)["NRT_WORKER_ORT_THREADS"]))
        assert threads <= float(container["resources"]["limits"]["cpu"]), name


# -- probes ---------------------------------------------------------------------------------------------------------


def test_the_gateway_probes_its_liveness_and_readiness_routes() -> None:
    health_routes = (ROOT / "services" / "api_gateway" / "health.py").read_text()
    assert '@get("/healthz"' in health_routes
    assert '"/readyz",' in health_routes
    container = _container(_of_kind("Deployment")["api-gateway"])
    assert container["livenessProbe"]["httpGet"] == {"path": "/healthz", "port": "http"}
    assert container["readinessProbe"]["httpGet"] == {"path": "/readyz", "port": "http"}
    assert container["startupProbe"]["httpGet"] == {"path": "/healthz", "port": "http"}
    [port] = container["ports"]
    assert port == {"name": "http", "containerPort": int(str(_environment(container)["NRT_GATEWAY_PORT"]))}
    assert _environment(container)["NRT_GATEWAY_HOST"] == "0.0.0.0"


def test_the_other_services_probe_their_health_subject_and_their_own_process() -> None:
    health = cli.commands["health"]
    assert "--timeout" in {option for param in health.params for option in param.opts}
    for name, workload in _workloads().items():
        container = _container(workload)
        process = _process(container)
        if process in ("api_gateway", "nrt"):
            continue
        # readiness: the service's health subject over NATS, as the pod's own identity
        command = container["readinessProbe"]["exec"]["command"]
        assert command[:3] == ["nrt", "health", process], name
        assert container["readinessProbe"]["timeoutSeconds"] >= 10, name  # a Python process on a busy node
        # liveness and start: this process's own metrics port (a NATS outage restarts nothing)
        ports = {port["name"]: port["containerPort"] for port in container["ports"]}
        assert ports["metrics"] == int(str(_environment(container)["NRT_METRICS_PORT"])), name
        for probe in ("livenessProbe", "startupProbe"):
            assert container[probe]["tcpSocket"] == {"port": "metrics"}, (name, probe)


# -- settings, secrets, config maps ---------------------------------------------------------------------------------


def _settings_class(process: str) -> type[Settings]:
    return {name.strip("`"): cls for name, cls in settings_doc.readers()}[process]


def test_every_variable_is_a_setting_its_process_reads_and_its_value_is_accepted(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    read_by = readers()
    secrets = _example_secrets()
    for name, workload in _workloads().items():
        container = _container(workload)
        process = _process(container)
        environment = _environment(container)
        for variable in environment:
            if variable.startswith(("NRT_", "OTEL_")):
                assert process in read_by.get(variable, set()), (name, variable)
        # the values as the process would read them (a Secret's: its template's placeholder)
        with monkeypatch.context() as patched:
            for variable, value in environment.items():
                if value is None:
                    [ref] = [e["valueFrom"]["secretKeyRef"] for e in container["env"] if e["name"] == variable]
                    value = secrets[ref["name"]][ref["key"]]
                patched.setenv(variable, value)
            try:
                _settings_class(process).from_env()
            except SettingsError as exc:
                pytest.fail(f"{name}: {exc}")


def test_only_cluster_state_and_the_migrations_see_the_database_and_only_cluster_state_the_keys() -> None:
    for name, workload in _workloads().items():
        environment = _environment(_container(workload))
        assert ("NRT_DATABASE_URL" in environment) == (name in ("cluster-state", "nrt-migrate")), name
        assert ("NRT_API_KEY" in environment) == ("NRT_ADMIN_KEY" in environment) == (name == "cluster-state"), name


def test_every_secret_and_config_map_referenced_exists_with_its_keys() -> None:
    secrets, config_maps = _example_secrets(), _generated_config_maps()
    for name, workload in _workloads().items():
        container = _container(workload)
        for variable in container.get("env", []):
            if "valueFrom" in variable:
                ref = variable["valueFrom"]["secretKeyRef"]
                assert ref["key"] in secrets[ref["name"]], (name, ref)
        for source in container.get("envFrom", []):
            assert source["configMapRef"]["name"] in config_maps, name
        for volume in _pod(workload).get("volumes", []):
            if "secret" in volume:
                secret = volume["secret"]
                assert {item["key"] for item in secret["items"]} <= set(secrets[secret["secretName"]]), name
            if "configMap" in volume:
                assert volume["configMap"]["name"] in config_maps, name
    # the templates' header creates exactly these Secrets, and no template holds a real seed
    header = (KUBERNETES / "secrets.example.yaml").read_text()
    assert set(re.findall(r"create secret generic (\S+)", header)) == set(secrets)
    for data in secrets.values():
        for value in data.values():
            assert not re.fullmatch(r"SU[A-Z2-7]{56}", value.strip())


def test_each_pod_mounts_its_own_bus_seed_alone_where_its_settings_name_it() -> None:
    services = set(BUS_IDENTITIES) - {"nrt"}  # the CLI's seed stays with the operator
    assert set(_example_secrets()["nrt-bus"]) == {f"{service}.nk" for service in services}
    for name, workload in _workloads().items():
        container = _container(workload)
        process = _process(container)
        bus = [v for v in _pod(workload).get("volumes", []) if v.get("secret", {}).get("secretName") == "nrt-bus"]
        if process == "nrt":
            assert bus == [], name  # the migrations need no NATS
            continue
        [volume] = bus
        [item] = volume["secret"]["items"]
        assert item["key"] == f"{process}.nk", name
        assert volume["secret"]["defaultMode"] == 0o440, name  # the group nrt (fsGroup) reads it
        [mount] = [m for m in container["volumeMounts"] if m["name"] == volume["name"]]
        assert mount["readOnly"] is True, name
        assert _environment(container)["NRT_NATS_NKEY_SEED_FILE"] == f"{mount['mountPath']}/{item['path']}", name


def test_cluster_state_applies_the_repositorys_manifest_whose_models_the_image_carries() -> None:
    [generator] = [g for g in kustomization()["configMapGenerator"] if g["name"] == "nrt-manifest"]
    [file] = generator["files"]
    text = (KUBERNETES / file).read_text()
    assert text == (ROOT / "manifests" / "customer-support.yaml").read_text()
    manifest = parse_manifest(text, file)
    prepared = set(
        re.findall(r"nrt models prepare ([\w.-]+)", " ".join(instructions(dockerfile_stages()["build"][1], "RUN")))
    )
    sources = {spec.source.removeprefix("catalogue://") for spec in manifest.models}
    assert sources <= prepared
    container = _container(_of_kind("Deployment")["cluster-state"])
    [volume] = [v for v in _pod(_of_kind("Deployment")["cluster-state"])["volumes"] if "configMap" in v]
    assert volume["configMap"]["name"] == "nrt-manifest"
    [mount] = [m for m in container["volumeMounts"] if m["name"] == volume["name"]]
    assert _environment(container)["NRT_MANIFEST"] == f"{mount['mountPath']}/{file}"


# -- services and disruption budgets -------------------------------------------------------------------------------


def _selects(selector: dict[str, str], workload: dict[str, Any]) -> bool:
    labels: dict[str, str] = workload["spec"]["template"]["metadata"]["labels"]
    return selector.items() <= labels.items()


def test_every_service_selects_one_workloads_pods_on_ports_they_open() -> None:
    workloads = _workloads()
    for name, service in _of_kind("Service").items():
        [target] = [w for w in workloads.values() if _selects(service["spec"]["selector"], w)]
        ports = {port["name"] for port in _container(target)["ports"]}
        for port in service["spec"]["ports"]:
            assert port["targetPort"] in ports, (name, port)
    assert _of_kind("Service")["api-gateway"]["spec"]["type"] == "ClusterIP"
    for name, statefulset in _of_kind("StatefulSet").items():
        governing = _of_kind("Service")[statefulset["spec"]["serviceName"]]
        assert governing["spec"]["clusterIP"] == "None", name  # headless, as a StatefulSet's must be
        assert _selects(governing["spec"]["selector"], statefulset), name


def test_every_long_running_workload_has_one_disruption_budget_that_lets_a_drain_proceed() -> None:
    workloads = {name: w for name, w in _workloads().items() if w["kind"] != "Job"}
    budgets = _of_kind("PodDisruptionBudget")
    covered = []
    for name, budget in budgets.items():
        [target] = [w for w in workloads.values() if _selects(budget["spec"]["selector"]["matchLabels"], w)]
        covered.append(target["metadata"]["name"])
        # a budget never selects pods of another workload (their labels differ by component)
        assert budget["spec"]["selector"]["matchLabels"] == target["spec"]["selector"]["matchLabels"], name
        replicas = target["spec"]["replicas"]
        if "minAvailable" in budget["spec"]:
            assert 1 <= budget["spec"]["minAvailable"] < replicas, name  # one pod may go at a time
        else:
            assert budget["spec"]["maxUnavailable"] >= 1, name
    assert sorted(covered) == sorted(workloads)


# -- NATS, from its official chart ----------------------------------------------------------------------------------


def test_nats_comes_from_its_chart_as_a_cluster_with_jetstream_and_nrts_users() -> None:
    values = yaml.safe_load((KUBERNETES / "nats-values.yaml").read_text())
    assert values["config"]["cluster"] == {"enabled": True, "replicas": 3}
    assert values["config"]["jetstream"]["enabled"] is True
    include = values["config"]["merge"]["$include"]
    header = (KUBERNETES / "nats-values.yaml").read_text()
    assert "helm install nats nats/nats" in header
    escaped = include.replace(".", "\\.")  # helm's --set-file: a dot in a key is escaped
    assert f"--set-file 'configMap.merge.data.{escaped}=bus/nats-server.conf'" in header
    # the release `nats` in the same namespace: its client Service
    assert env_file(KUBERNETES / "nrt.env")["NRT_NATS_URL"] == "nats://nats:4222"


def test_the_readme_says_how_to_run_on_many_machines() -> None:
    readme = (ROOT / "README.md").read_text()
    section = readme.split("## Running on many machines\n", 1)[1].split("\n## ", 1)[0]
    for needed in (
        "kubectl apply -k deploy/kubernetes",
        "deploy/kubernetes/nats-values.yaml",
        "nats/nats",
        "kubectl -n nrt create secret generic nrt-bus",
        "deploy/compose/worker.yml",
        "--profile gpu",
        "NRT_DATABASE_URL",
    ):
        assert needed in section, needed
