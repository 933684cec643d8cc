"""An NRT cluster spread over simulated hosts (:mod:`nrt.testing.hosts`), as an operator runs one on many machines.

The layout (``H`` hosts, each a network namespace with its own address):

- NATS: one node on each of the first :attr:`ClusterLayout.nats_nodes` hosts, clustered over their
  addresses (routes), JetStream on each with its own store; the services are given every node's URL.
- PostgreSQL: the test's server of this (the root) namespace, reached from the hosts through
  :meth:`HostNetwork.expose`, as a database on another machine is.
- Two whole stacks, ``nrt up`` with the NATS and the database given, on hosts ``h1`` and ``h2``:
  each runs a gateway, a router_svc, a cluster_state and a worker (the second cluster_state waits as
  the standby).
- Worker-only hosts: ``python -m specialist_worker`` on the remaining hosts, as the compose worker
  file adds a host.

Each process has its own data directory (its own ``NRT_HOME`` holding the tiny models) and its own
log in the work directory. Faults are real: a process is killed or stopped by its pid, a host's
link is cut.
"""

from __future__ import annotations

import contextlib
import os
import signal
import subprocess
import sys
import time
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import httpx
import psycopg

from nrt.adapters.infra.embedded_nats import nats_server_binary
from nrt.adapters.infra.pgurl import to_libpq, to_sqlalchemy
from nrt.testing.hosts import Host, HostNetwork
from nrt.testing.processes import python_services
from nrt.testing.stacks import link_tiny_models

NATS_PORT = 4222
NATS_CLUSTER_PORT = 6222
GATEWAY_PORT = 8080
# The API keys every stack of the cluster serves (one cluster, one set of keys).
API_KEY = "nrt-hosted-cluster-infer-key-0123456789abcdef"
ADMIN_KEY = "nrt-hosted-cluster-admin-key-0123456789abcdef"
SERVICES = ("api_gateway", "router_svc", "cluster_state", "specialist_worker")


@dataclass(frozen=True, slots=True)
class ClusterLayout:
    hosts: int = 4  # h1, h2 run whole stacks; the rest run a worker each
    nats_nodes: int = 3  # on h1 .. hN


@dataclass
class NatsNode:
    host: Host
    store: Path
    log: Path
    peers: list[str]  # the other nodes' route URLs
    process: subprocess.Popen[bytes] | None = None

    @property
    def url(self) -> str:
        return f"nats://{self.host.address}:{NATS_PORT}"

    def start(self) -> None:
        argv = [
            str(nats_server_binary()),
            *("--addr", self.host.address),
            *("--port", str(NATS_PORT)),
            *("--server_name", f"nats-{self.host.name}"),
            "--jetstream",
            *("--store_dir", str(self.store)),
            *("--cluster_name", "nrt"),
            *("--cluster", f"nats://{self.host.address}:{NATS_CLUSTER_PORT}"),
            *("--routes", ",".join(self.peers)),
        ]
        self.process = self.host.spawn(argv, log=self.log)

    def kill(self) -> None:
        if self.process is not None and self.process.poll() is None:
            self.process.kill()
            self.process.wait()


@dataclass
class StackOnHost:
    """``nrt up`` on a host: its four services, found below it by name."""

    host: Host
    process: subprocess.Popen[bytes]
    data_dir: Path
    log: Path

    @property
    def gateway_url(self) -> str:
        return f"http://{self.host.address}:{GATEWAY_PORT}"

    def service_pid(self, service: str) -> int | None:
        return python_services(self.process.pid, SERVICES).get(service)


@dataclass
class HostedCluster:
    network: HostNetwork
    work: Path  # logs and data directories
    tiny_artifacts: Path
    manifest: Path
    database_url: str  # on this namespace's loopback
    layout: ClusterLayout = field(default_factory=ClusterLayout)
    nats: list[NatsNode] = field(default_factory=list)
    stacks: list[StackOnHost] = field(default_factory=list)
    workers: dict[str, subprocess.Popen[bytes]] = field(default_factory=dict)  # host name -> worker-only process
    exposed_database_url: str = ""

    @property
    def nats_urls(self) -> str:
        """Every node, comma-separated, as the services are given them."""
        return ",".join(node.url for node in self.nats)

    @property
    def gateways(self) -> list[str]:
        return [stack.gateway_url for stack in self.stacks]

    @property
    def headers(self) -> dict[str, str]:
        return {"Authorization": f"Bearer {API_KEY}"}

    @property
    def admin_headers(self) -> dict[str, str]:
        return {"Authorization": f"Bearer {ADMIN_KEY}"}

    @property
    def operator_env(self) -> dict[str, str]:
        """What an operator's `nrt` command runs with against this cluster (from this namespace)."""
        return {"NRT_DATABASE_URL": self.database_url, "NRT_GATEWAY_URL": self.gateways[0], "NRT_ADMIN_KEY": ADMIN_KEY}

    def start(self, ready_within: float = 420.0) -> None:
        hosts = self.network.hosts
        routes = [f"nats://{host.address}:{NATS_CLUSTER_PORT}" for host in hosts[: self.layout.nats_nodes]]
        for host, route in zip(hosts, routes, strict=False):
            node = NatsNode(host, self.work / host.name / "nats", self.work / "logs" / f"nats-{host.name}.log", [])
            node.peers = [r for r in routes if r != route]
            node.start()
            self.nats.append(node)
        self._wait_nats(60.0)
        host_part, _, rest = to_sqlalchemy(self.database_url).rpartition("@")
        port = int(rest.split("/", 1)[0].rsplit(":", 1)[1])
        exposed = self.network.expose(port)
        self.exposed_database_url = f"{host_part}@{self.network.address}:{exposed}/{rest.split('/', 1)[1]}"
        for host in hosts[:2]:
            self.stacks.append(self._up(host))
        deadline = time.monotonic() + ready_within
        for stack in self.stacks:
            while self._not_ready(stack) is not None:
                assert stack.process.poll() is None, (
                    f"nrt up on {stack.host.name} exited with {stack.process.returncode}:\n"
                    f"{stack.log.read_text()[-3000:]}"
                )
                assert time.monotonic() < deadline, (
                    f"nrt up on {stack.host.name} was not ready in time:\n{stack.log.read_text()[-3000:]}"
                )
                time.sleep(0.5)
        # Worker-only hosts join a running cluster (its stream exists), as a host added later does.
        for host in hosts[2:]:
            self.workers[host.name] = self._worker(host)
        expected = {worker_id(host) for host in hosts}
        while not expected <= set(self.state()["workers"]):
            for name, process in self.workers.items():
                assert process.poll() is None, (
                    f"the worker on {name} exited:\n{self.worker_log(name).read_text()[-3000:]}"
                )
            assert time.monotonic() < deadline, f"workers {expected - set(self.state()['workers'])} did not join"
            time.sleep(0.5)

    def state(self) -> dict[str, Any]:
        """``GET /v1/cluster`` from the first gateway that answers (the operator's view)."""
        problem = ""
        for url in self.gateways:
            try:
                response = httpx.get(f"{url}/v1/cluster", headers=self.admin_headers, timeout=5)
            except httpx.HTTPError as exc:
                problem = f"{url}: {exc!r}"
                continue
            if response.status_code == 200:
                state: dict[str, Any] = response.json()
                return state
            problem = f"{url}: {response.status_code} {response.text[:200]}"
        raise AssertionError(f"no gateway answered /v1/cluster: {problem}")

    def leader(self) -> StackOnHost:
        """The stack whose cluster_state leads (the other's waits as the standby): the holder of the lease in
        the log's ``leadership`` record is ``HOST-PID`` (the instance id each service answers health with)."""
        with psycopg.connect(to_libpq(self.database_url)) as conn:
            row = conn.execute("SELECT holder FROM leadership").fetchone()
        assert row is not None, "no cluster_state has led yet"
        pid = int(str(row[0]).rsplit("-", 1)[1])
        leading = [stack for stack in self.stacks if stack.service_pid("cluster_state") == pid]
        assert len(leading) == 1, f"the lease's holder {row[0]} is no cluster_state of this cluster's stacks"
        return leading[0]

    def holders(self, model_id: str) -> list[Host]:
        """The hosts whose worker holds ``model_id`` resident."""
        placements = self.state()["models"][model_id]["placements"]
        held = {p["worker_id"] for p in placements.values() if p["tier"] == "resident"}
        return [host for host in self.network.hosts if worker_id(host) in held]

    def specialists(self) -> list[str]:
        """The models the hosts' workers serve (the router's own lives in router_svc, under another worker id)."""
        ours = {worker_id(host) for host in self.network.hosts}
        models = self.state()["models"]
        return sorted(m for m, model in models.items() if ours & set(model["placements"]))

    def holders_to_kill(self) -> list[Host]:
        """One host per specialist model holding it, as few hosts as that takes (a host may hold several)."""
        chosen: list[Host] = []
        for model_id in self.specialists():
            holders = self.holders(model_id)
            assert holders, f"no worker holds {model_id}"
            if not any(host in chosen for host in holders):
                chosen.append(holders[-1])
        return chosen

    def busiest_worker_host(self) -> Host:
        """Of the hosts running a worker alone, the one whose worker holds the most specialist models."""
        alone = [host for host in self.network.hosts if host.name in self.workers]
        held = {host.name: sum(host in self.holders(m) for m in self.specialists()) for host in alone}
        busiest = max(alone, key=lambda host: held[host.name])
        assert held[busiest.name] > 0, f"no worker alone on its host holds a specialist: {held}"
        return busiest

    def kill_worker(self, host: Host) -> None:
        """SIGKILL the worker on ``host``: a stack's own is restarted by its `nrt up`, one alone on its host
        only by :meth:`restart_workers`."""
        process = self.workers.get(host.name)
        if process is not None:
            process.kill()
            process.wait()
            return
        stack = next(stack for stack in self.stacks if stack.host == host)
        pid = stack.service_pid("specialist_worker")
        assert pid is not None, f"no worker process on {host.name}"
        os.kill(pid, signal.SIGKILL)

    def restart_workers(self) -> None:
        """Start again each worker alone on its host that has exited."""
        for host in self.network.hosts:
            process = self.workers.get(host.name)
            if process is not None and process.poll() is not None:
                self.workers[host.name] = self._worker(host)

    def wait_whole(self, within: float) -> None:
        """Until every NATS node is clustered, both gateways are ready and every worker has joined: the
        cluster as it was before a fault (``nrt up`` restarts the services it supervises itself)."""
        deadline = time.monotonic() + within
        self._wait_nats(within)
        for stack in self.stacks:
            while (why := self._not_ready(stack)) is not None:
                assert time.monotonic() < deadline, (
                    f"the gateway on {stack.host.name} is not ready again: {why}\n{stack.log.read_text()[-3000:]}"
                )
                time.sleep(0.3)
        expected = {worker_id(host) for host in self.network.hosts}
        while not expected <= set(self.state()["workers"]):
            assert time.monotonic() < deadline, f"workers {expected - set(self.state()['workers'])} did not join again"
            time.sleep(0.3)

    def worker_log(self, host_name: str) -> Path:
        return self.work / "logs" / f"worker-{host_name}.log"

    def _env(self, host: Host, role: str) -> dict[str, str]:
        home = self.work / host.name / role / "home"
        if not (home / "models").exists():
            link_tiny_models(home, self.tiny_artifacts)
        return {k: v for k, v in os.environ.items() if not k.startswith("NRT_")} | {
            "NRT_HOME": str(home),
            "NRT_NATS_URL": self.nats_urls,
            "NRT_DATABASE_URL": self.exposed_database_url,
            "NRT_API_KEY": API_KEY,
            "NRT_ADMIN_KEY": ADMIN_KEY,
            "NRT_WORKER_ID": worker_id(host),
            "NRT_WORKER_RAM": "2GB",
            "NRT_WORKER_ORT_THREADS": "1",
        }

    def _up(self, host: Host) -> StackOnHost:
        data_dir = self.work / host.name / "stack"
        log = self.work / "logs" / f"nrt-up-{host.name}.log"
        argv = [
            sys.executable,
            *("-m", "nrt.entrypoints.cli.main", "up"),
            *("--manifest", str(self.manifest)),
            *("--host", host.address, "--port", str(GATEWAY_PORT)),
            *("--data-dir", str(data_dir)),
            *("--ready-timeout", "400"),
        ]
        process = host.spawn(argv, env=self._env(host, "stack"), log=log)
        return StackOnHost(host, process, data_dir, log)

    def _worker(self, host: Host) -> subprocess.Popen[bytes]:
        log = self.worker_log(host.name)
        return host.spawn([sys.executable, "-m", "specialist_worker"], env=self._env(host, "worker"), log=log)

    def _wait_nats(self, within: float) -> None:
        """Until every node answers with JetStream and sees the others (its routes are up)."""
        deadline = time.monotonic() + within
        for node in self.nats:
            while not _nats_ready(node, len(self.nats) - 1):
                assert node.process is not None, f"NATS on {node.host.name} was not started"
                assert node.process.poll() is None, node.log.read_text()[-3000:]
                assert time.monotonic() < deadline, f"NATS on {node.host.name} not clustered:\n{node.log.read_text()}"
                time.sleep(0.3)

    def _not_ready(self, stack: StackOnHost) -> str | None:
        """Why ``stack``'s gateway is not ready (its ``/readyz`` answer, or the error reaching it); None: ready."""
        try:
            answer = httpx.get(f"{stack.gateway_url}/readyz", timeout=2)
        except httpx.HTTPError as exc:
            return repr(exc)
        return None if answer.status_code == 200 else f"{answer.status_code} {answer.text[:2000]}"

    def stop(self) -> None:
        for stack in self.stacks:
            _stop_group(stack.process, signal.SIGTERM, 60)
        for process in self.workers.values():
            _stop_group(process, signal.SIGTERM, 30)
        for node in self.nats:
            node.kill()


def worker_id(host: Host) -> str:
    """The id of the worker on ``host`` (a stack's own, or the host's only process)."""
    return f"worker-{host.name}"


def _nats_ready(node: NatsNode, peers: int) -> bool:
    """The node's JetStream answers and its routes to ``peers`` others are up (from its log)."""
    if node.process is None or not node.log.exists():
        return False
    text = node.log.read_text(errors="replace")
    return "Server is ready" in text and text.count("Route connection created") >= peers


def _stop_group(process: subprocess.Popen[bytes], sig: int, within: float) -> None:
    """Stop a process and every process below it (its own session), waiting ``within`` before SIGKILL."""
    if process.poll() is not None:
        return
    with contextlib.suppress(ProcessLookupError):
        os.killpg(process.pid, signal.SIGCONT)
        os.killpg(process.pid, sig)
    try:
        process.wait(within)
    except subprocess.TimeoutExpired:
        with contextlib.suppress(ProcessLookupError):
            os.killpg(process.pid, signal.SIGKILL)
        process.wait()


@contextlib.contextmanager
def hosted_cluster(
    work: Path,
    tiny_artifacts: Path,
    manifest: Path,
    database_url: str,
    layout: ClusterLayout | None = None,
) -> Iterator[HostedCluster]:
    """A started :class:`HostedCluster` on a new :class:`HostNetwork`; everything stopped and removed after."""
    layout = layout or ClusterLayout()
    with HostNetwork(layout.hosts) as network:
        cluster = HostedCluster(network, work, tiny_artifacts, manifest, database_url, layout)
        try:
            cluster.start()
            yield cluster
        finally:
            cluster.stop()
