from __future__ import annotations

import socket
import time

import pytest

from nrt.adapters.infra import PortTimeoutError, free_port, port_is_open, wait_for_port


def test_free_port_is_bindable_on_loopback() -> None:
    port = free_port()
    assert 1024 < port < 65536
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", port))


def test_wait_for_port_returns_once_listening() -> None:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        sock.listen()
        port = sock.getsockname()[1]
        wait_for_port("127.0.0.1", port, timeout=2)
        assert port_is_open("127.0.0.1", port)


def test_wait_for_port_times_out_with_a_clear_error() -> None:
    port = free_port()
    began = time.monotonic()
    with pytest.raises(PortTimeoutError, match=rf"127\.0\.0\.1:{port} within 0\.3s") as info:
        wait_for_port("127.0.0.1", port, timeout=0.3)
    assert isinstance(info.value, TimeoutError)
    assert "ConnectionRefusedError" in str(info.value)
    assert time.monotonic() - began < 2
