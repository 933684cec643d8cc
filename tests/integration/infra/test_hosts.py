"""Simulated hosts (nrt.testing.hosts): real TCP between network namespaces, and a partition that cuts it."""

from __future__ import annotations

import socket
import subprocess
import sys
import threading
import time
from collections.abc import Iterator
from pathlib import Path

import pytest

from nrt.testing.hosts import Host, HostNetwork, unavailable

pytestmark = pytest.mark.skipif(unavailable() is not None, reason=str(unavailable()))

PORT = 7001
# Answers each connection with the name of the host it runs on, then closes it.
SERVER = """
import socket, sys
server = socket.create_server(("0.0.0.0", int(sys.argv[1])))
while True:
    conn, _ = server.accept()
    conn.sendall(sys.argv[2].encode())
    conn.close()
"""
CLIENT = """
import socket, sys
try:
    with socket.create_connection((sys.argv[1], int(sys.argv[2])), timeout=1.0) as conn:
        print(conn.recv(100).decode())
except OSError as exc:
    print(f"unreachable: {exc}")
"""


@pytest.fixture
def network() -> Iterator[HostNetwork]:
    with HostNetwork(3) as made:
        yield made


def serve(host: Host, tmp_path: Path) -> subprocess.Popen[bytes]:
    server = host.spawn([sys.executable, "-c", SERVER, str(PORT), host.name], log=tmp_path / f"{host.name}.log")
    deadline = time.monotonic() + 10
    while f":{PORT} " not in host.run(["ss", "-ltnH"]).stdout:
        assert time.monotonic() < deadline, "the server did not listen"
        time.sleep(0.1)
    return server


def ask(source: Host, target: Host) -> str:
    return source.run([sys.executable, "-c", CLIENT, target.address, str(PORT)]).stdout.strip()


def test_hosts_talk_over_the_bridge_and_a_cut_host_is_partitioned(network: HostNetwork, tmp_path: Path) -> None:
    h1, h2, h3 = network.hosts
    assert len({h1.address, h2.address, h3.address, network.address}) == 4
    server = serve(h1, tmp_path)
    try:
        assert ask(h2, h1) == "h1"
        assert ask(h3, h1) == "h1"
        # Each host has its own loopback: h1's server is not on h2's 127.0.0.1.
        assert ask(h2, Host("h2", h2.namespace, "127.0.0.1", h2.link)).startswith("unreachable")
        # The root namespace reaches a host at its address.
        with socket.create_connection((h1.address, PORT), timeout=2.0) as conn:
            assert conn.recv(100) == b"h1"

        h1.cut()
        assert ask(h2, h1).startswith("unreachable")
        assert server.poll() is None, "a partition leaves the host's processes running"
        h1.heal()
        deadline = time.monotonic() + 10
        while (answer := ask(h2, h1)) != "h1":
            assert time.monotonic() < deadline, f"h1 not reachable again after heal: {answer}"
    finally:
        server.kill()
        server.wait()


def test_the_network_is_removed_on_exit() -> None:
    with HostNetwork(2) as made:
        namespaces = [host.namespace for host in made.hosts]
        bridge = made.bridge
    listed = subprocess.run(["ip", "netns", "list"], capture_output=True, text=True, check=True).stdout
    assert not any(namespace in listed for namespace in namespaces)
    links = subprocess.run(["ip", "-o", "link", "show"], capture_output=True, text=True, check=True).stdout
    assert f" {bridge}:" not in links


def test_a_loopback_server_here_is_exposed_to_the_hosts(network: HostNetwork) -> None:
    with socket.create_server(("127.0.0.1", 0)) as server:
        port = network.expose(server.getsockname()[1])

        def answer() -> None:
            conn, _ = server.accept()
            with conn:
                conn.sendall(b"root:" + conn.recv(100))

        threading.Thread(target=answer, daemon=True).start()
        probe = (
            "import socket, sys\n"
            f"c = socket.create_connection(('{network.address}', {port}), timeout=2)\n"
            "c.sendall(b'hello'); print(c.recv(100).decode())"
        )
        assert network.hosts[0].run([sys.executable, "-c", probe]).stdout.strip() == "root:hello"
