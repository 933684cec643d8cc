"""A NATS cluster on this machine: N embedded nats-servers with JetStream, routed to each other, for tests
and ``nrt up --nats-cluster N``.

Each server is an :class:`EmbeddedNats` of its own (its data directory ``node-<i>``, its client port, its
route port, its name ``<cluster>-<i>``), started with the same server config (NRT's users and their
permissions), so a client may connect to any of them. The servers start together and only then are
waited for: JetStream answers once a majority of them has elected its meta leader. A server that is
stopped (or killed) and started again keeps its ports and its store, and rejoins the others.

    with EmbeddedNatsCluster(tmp_path / "nats", size=3) as cluster:
        client = await nats.connect(cluster.urls)   # or NRT_NATS_URL=cluster.url
"""

from __future__ import annotations

import atexit
import logging
import os
import shutil
import tempfile
import time
from pathlib import Path
from typing import Self

from nrt.adapters.infra._server import ServerHandle
from nrt.adapters.infra.embedded_nats import ClusterRoutes, EmbeddedNats
from nrt.adapters.infra.errors import InfraError
from nrt.adapters.infra.ports import LOOPBACK, free_port

_log = logging.getLogger("nrt.adapters.infra")

MIN_SIZE = 3  # fewer servers keep no quorum once one goes: JetStream replication needs three


class EmbeddedNatsCluster(ServerHandle):
    """``size`` nats-servers with JetStream, routed into one cluster named ``name``, on 127.0.0.1.

    ``data_dir=None``: a temporary directory, removed on stop. ``config_file`` and ``scheme`` as for
    :class:`EmbeddedNats` (every server gets the same)."""

    def __init__(
        self,
        data_dir: str | os.PathLike[str] | None = None,
        *,
        size: int = 3,
        name: str = "nrt",
        config_file: Path | None = None,
        scheme: str = "nats",
        startup_timeout: float = 30.0,
        stop_timeout: float = 10.0,
    ) -> None:
        if size < MIN_SIZE:
            raise InfraError(
                f"a NATS cluster needs at least {MIN_SIZE} servers to keep a quorum when one goes (asked for {size}); "
                "run a single server instead"
            )
        self.size = size
        self.name = name
        self.config_file = config_file
        self.scheme = scheme
        self.startup_timeout = startup_timeout
        self.stop_timeout = stop_timeout
        self._temporary = data_dir is None
        self.data_dir = Path(data_dir).absolute() if data_dir is not None else None
        self._nodes: tuple[EmbeddedNats, ...] = ()
        self.startup_s: float | None = None

    @property
    def nodes(self) -> tuple[EmbeddedNats, ...]:
        """The servers, in order (``<name>-1`` first)."""
        if not self._nodes:
            raise InfraError("EmbeddedNatsCluster is not running: call start() first")
        return self._nodes

    @property
    def urls(self) -> list[str]:
        """Every server's client URL."""
        return [node.url for node in self.nodes]

    @property
    def url(self) -> str:
        """Every server's client URL separated by commas: ``NRT_NATS_URL`` for the cluster."""
        return ",".join(self.urls)

    @property
    def address(self) -> str:
        return self.url

    @property
    def running(self) -> bool:
        return bool(self._nodes) and all(node.running for node in self._nodes)

    def node_named(self, server_name: str) -> EmbeddedNats:
        """The server JetStream calls ``server_name`` (a stream's leader, a peer)."""
        for node in self.nodes:
            if node.server_name == server_name:
                return node
        raise InfraError(f"no server of cluster {self.name} is named {server_name!r}")

    def _build(self, data_dir: Path) -> tuple[EmbeddedNats, ...]:
        route_ports = [free_port() for _ in range(self.size)]
        routes = tuple(f"nats://{LOOPBACK}:{port}" for port in route_ports)
        return tuple(
            EmbeddedNats(
                data_dir / f"node-{index}",
                server_name=f"{self.name}-{index}",
                startup_timeout=self.startup_timeout,
                stop_timeout=self.stop_timeout,
                config_file=self.config_file,
                scheme=self.scheme,
                cluster=ClusterRoutes(self.name, port, routes),
            )
            for index, port in enumerate(route_ports, start=1)
        )

    def start(self) -> Self:
        """Start every server, then wait until each listens and JetStream answers. A no-op when running."""
        if self.running:
            return self
        began = time.monotonic()
        if self.data_dir is None:
            self.data_dir = Path(tempfile.mkdtemp(prefix="nrt-nats-cluster-"))
        if not self._nodes:
            self._nodes = self._build(self.data_dir)
        try:
            started = [node for node in self._nodes if node.spawn()]
            for node in started:
                node.wait_ready(began)
            for node in self._nodes:
                node.pin_port()  # a server started again listens where the clients' URL lists say
        except BaseException:
            self.stop()
            raise
        self.startup_s = time.monotonic() - began
        atexit.register(self.stop)
        _log.info("embedded NATS cluster %s ready at %s in %.2fs", self.name, self.url, self.startup_s)
        return self

    def pin_port(self) -> None:
        """Each server keeps its port across restarts (they are pinned at start already)."""
        for node in self.nodes:
            node.pin_port()

    def stop(self) -> None:
        """Stop every server (SIGTERM, SIGKILL after ``stop_timeout``). Idempotent; the stores are kept unless
        the data directory was a temporary one."""
        atexit.unregister(self.stop)
        for node in self._nodes:
            node.stop()
        if self._temporary and self.data_dir is not None:
            shutil.rmtree(self.data_dir, ignore_errors=True)
            self.data_dir = None
            self._nodes = ()

    def __repr__(self) -> str:
        where = self.url if self.running else "stopped"
        return f"EmbeddedNatsCluster({self.name}, {where}, data_dir={self.data_dir})"
