"""Several hosts on one machine, for tests of a cluster that spans machines: Linux network namespaces.

A :class:`HostNetwork` makes ``count`` hosts. Each is a network namespace with its own loopback and
one veth link to a bridge in this (the root) namespace, with its own address on a private test
subnet (``10.231.K.0/24``, K free on this machine); the bridge holds ``.1``, so a process here that
listens on :attr:`HostNetwork.address` (or on every address) is reachable from every host, and host
``i`` is ``.1{i}``. A process runs on a host through ``ip netns exec`` (:meth:`Host.spawn`), sees
only that host's interfaces, and talks to the others over the bridge: what crosses between hosts is
real TCP, not loopback. :meth:`Host.cut` takes the host's link down, a partition: its processes
live on but reach no other host (and none reaches them) until :meth:`Host.heal`.

Traffic stays on this machine: the subnet exists only on the bridge and in the namespaces made
here (and a firewall rule that lets it cross the bridge), and everything is removed on exit (a namespace or bridge left by a killed run of the same
subnet is removed before it is made again). A server of this namespace that listens on loopback only
(a test's PostgreSQL) is reached from the hosts through :meth:`HostNetwork.expose`. Needs root and iproute2: :func:`unavailable` says why a
test cannot run where they are missing.
"""

from __future__ import annotations

import contextlib
import os
import shutil
import socket
import subprocess
import threading
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from types import TracebackType
from typing import IO, Self

SUBNET_PREFIX = "10.231"  # 10.231.K.0/24, one K per HostNetwork alive on this machine
PREFIX_LENGTH = 24
MAX_HOSTS = 80  # host i is .1{i}: .11 .. .90 (and .1 the bridge)


def unavailable() -> str | None:
    """Why hosts cannot be made here (not root, no ``ip``), or None."""
    if os.geteuid() != 0:
        return "network namespaces need root"
    if shutil.which("ip") is None:
        return "network namespaces need iproute2's `ip`"
    return None


def _ip(*args: str, check: bool = True) -> subprocess.CompletedProcess[str]:
    return subprocess.run(["ip", *args], check=check, capture_output=True, text=True)


def _subnets_in_use() -> set[int]:
    """The K of every 10.231.K.x address on this machine's interfaces."""
    listed = _ip("-o", "-4", "addr", "show").stdout
    taken: set[int] = set()
    for line in listed.splitlines():
        for word in line.split():
            if word.startswith(f"{SUBNET_PREFIX}."):
                taken.add(int(word.split(".")[2]))
    return taken


@dataclass(frozen=True, slots=True)
class Host:
    """One simulated machine: a network namespace with one address."""

    name: str  # h1, h2, ...
    namespace: str
    address: str
    link: str  # the root namespace's end of its veth pair, on the bridge

    def command(self, argv: Sequence[str]) -> list[str]:
        """``argv`` run on this host."""
        return ["ip", "netns", "exec", self.namespace, *argv]

    def spawn(
        self,
        argv: Sequence[str],
        env: Mapping[str, str] | None = None,
        log: Path | None = None,
        cwd: Path | None = None,
    ) -> subprocess.Popen[bytes]:
        """Start ``argv`` on this host (stdout and stderr to ``log`` when given), in its own process group."""
        out: IO[bytes] | int = subprocess.DEVNULL
        if log is not None:
            log.parent.mkdir(parents=True, exist_ok=True)
            out = log.open("ab")
        try:
            return subprocess.Popen(
                self.command(argv),
                env=dict(env) if env is not None else None,
                stdout=out,
                stderr=subprocess.STDOUT,
                cwd=cwd,
                start_new_session=True,
            )
        finally:
            if not isinstance(out, int):
                out.close()

    def run(self, argv: Sequence[str], timeout: float = 30.0) -> subprocess.CompletedProcess[str]:
        """Run ``argv`` on this host to its end."""
        return subprocess.run(self.command(argv), capture_output=True, text=True, timeout=timeout, check=False)

    def cut(self) -> None:
        """Partition this host from every other: its link goes down; its processes keep running."""
        _ip("link", "set", self.link, "down")

    def heal(self) -> None:
        """Join the network again after :meth:`cut`."""
        _ip("link", "set", self.link, "up")


@dataclass
class HostNetwork:
    """``count`` hosts on one bridge; a context manager that makes them and removes them."""

    count: int
    subnet: int = -1  # K of 10.231.K.0/24: the first free one when not given
    hosts: list[Host] = field(default_factory=list)
    _listeners: list[socket.socket] = field(default_factory=list)

    def __post_init__(self) -> None:
        if not 1 <= self.count <= MAX_HOSTS:
            raise ValueError(f"a HostNetwork has 1 to {MAX_HOSTS} hosts, not {self.count}")
        if self.subnet < 0:
            taken = _subnets_in_use()
            self.subnet = next(k for k in range(1, 255) if k not in taken)

    @property
    def bridge(self) -> str:
        return f"nrtb{self.subnet}"

    @property
    def address(self) -> str:
        """This (the root) namespace's address on the hosts' network: listen here to be reachable from them."""
        return f"{SUBNET_PREFIX}.{self.subnet}.1"

    def __enter__(self) -> Self:
        self._remove()  # what a killed run of the same subnet left
        try:
            _ip("link", "add", self.bridge, "type", "bridge")
            _ip("addr", "add", f"{self.address}/{PREFIX_LENGTH}", "dev", self.bridge)
            _ip("link", "set", self.bridge, "up")
            self._let_through()
            for index in range(1, self.count + 1):
                self.hosts.append(self._make_host(index))
        except BaseException:
            self._remove()
            raise
        return self

    def __exit__(
        self, kind: type[BaseException] | None, error: BaseException | None, traceback: TracebackType | None
    ) -> None:
        self._remove()

    def _forward_rule(self) -> list[str]:
        return [
            "FORWARD",
            "-i",
            self.bridge,
            "-o",
            self.bridge,
            "-j",
            "ACCEPT",
            "-m",
            "comment",
            "--comment",
            "nrt-hosts",
        ]

    def _let_through(self) -> None:
        """Let the hosts' traffic cross the bridge where the firewall drops forwarded packets (a Docker engine sets
        FORWARD's policy to DROP and has the bridges' frames pass through it)."""
        if shutil.which("iptables") is not None:
            subprocess.run(["iptables", "-w", "-I", *self._forward_rule()], check=True, capture_output=True)

    def _names(self, index: int) -> tuple[str, str]:
        """The namespace and root-side link of host ``index``."""
        return f"nrt-{self.subnet}-h{index}", f"nrt{self.subnet}h{index}"

    def _make_host(self, index: int) -> Host:
        namespace, link = self._names(index)
        address = f"{SUBNET_PREFIX}.{self.subnet}.{10 + index}"
        _ip("netns", "add", namespace)
        _ip("link", "add", link, "type", "veth", "peer", "name", "eth0", "netns", namespace)
        _ip("link", "set", link, "master", self.bridge, "up")
        _ip("-n", namespace, "addr", "add", f"{address}/{PREFIX_LENGTH}", "dev", "eth0")
        _ip("-n", namespace, "link", "set", "eth0", "up")
        _ip("-n", namespace, "link", "set", "lo", "up")
        return Host(name=f"h{index}", namespace=namespace, address=address, link=link)

    def _remove(self) -> None:
        """Every namespace, link and the bridge of this subnet, whether this run made them or not."""
        for listener in self._listeners:
            listener.close()
        self._listeners = []
        namespaces = set(_ip("netns", "list", check=False).stdout.split())
        links = {line.split(":")[1].strip().split("@")[0] for line in _ip("-o", "link", "show").stdout.splitlines()}
        for index in range(1, MAX_HOSTS + 1):
            namespace, link = self._names(index)
            if namespace in namespaces:
                _ip("netns", "delete", namespace, check=False)  # takes its veth pair with it
            if link in links:
                _ip("link", "delete", link, check=False)
        if self.bridge in links:
            _ip("link", "delete", self.bridge, check=False)
        if shutil.which("iptables") is not None:
            rule = self._forward_rule()
            while subprocess.run(["iptables", "-w", "-D", *rule], check=False, capture_output=True).returncode == 0:
                pass
        self.hosts = []

    def expose(self, port: int) -> int:
        """Make ``127.0.0.1:port`` of this namespace reachable from the hosts at :attr:`address`; the port there.

        A thread forwards each connection for as long as this network lives."""
        listener = socket.create_server((self.address, 0))
        self._listeners.append(listener)
        threading.Thread(target=_forward_all, args=(listener, port), daemon=True, name=f"expose {port}").start()
        bound: int = listener.getsockname()[1]
        return bound


def _forward_all(listener: socket.socket, port: int) -> None:
    """Accept on ``listener`` until it is closed; join each connection to ``127.0.0.1:port``."""
    while True:
        try:
            client, _ = listener.accept()
        except OSError:
            return  # closed with the network
        try:
            server = socket.create_connection(("127.0.0.1", port), timeout=10)
        except OSError:
            client.close()
            continue
        server.settimeout(None)
        for source, sink in ((client, server), (server, client)):
            threading.Thread(target=_pump, args=(source, sink), daemon=True).start()


def _pump(source: socket.socket, sink: socket.socket) -> None:
    """Copy ``source`` to ``sink`` until either ends, then close both."""
    try:
        while data := source.recv(65536):
            sink.sendall(data)
    except OSError:
        pass
    finally:
        for end in (source, sink):
            with contextlib.suppress(OSError):
                end.shutdown(socket.SHUT_RDWR)
            end.close()
