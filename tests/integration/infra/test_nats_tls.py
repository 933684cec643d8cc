"""Several hosts: the bus over TLS, with a certificate the test makes; a client without the CA is refused."""

from __future__ import annotations

import ssl
from collections.abc import Iterator
from pathlib import Path

import nats
import pytest
import trustme

from nrt.adapters.bus import rpc
from nrt.adapters.bus.auth import ServerTls, ensure_credentials
from nrt.adapters.bus.broker import start_broker
from nrt.adapters.bus.connection import connect
from nrt.adapters.bus.credentials import BusCredentials
from nrt.adapters.infra.embedded_nats import EmbeddedNats
from nrt.adapters.settings import Settings
from nrt.core.protocol import Health, HealthQuery
from nrt.entrypoints.service import ServiceContext, health_subject, serve_health


@pytest.fixture(scope="module")
def tls_bus(tmp_path_factory: pytest.TempPathFactory) -> Iterator[tuple[str, Path, Path]]:
    """(tls:// URL, credentials directory, CA bundle) of a nats-server that requires TLS and nkeys."""
    directory = tmp_path_factory.mktemp("tls-bus")
    ca = trustme.CA()
    server_cert = ca.issue_cert("127.0.0.1", "localhost")
    cert, key, bundle = directory / "server.pem", directory / "server.key", directory / "ca.pem"
    server_cert.cert_chain_pems[0].write_to_path(str(cert))
    server_cert.private_key_pem.write_to_path(str(key))
    ca.cert_pem.write_to_path(str(bundle))
    config = ensure_credentials(directory / "keys", tls=ServerTls(cert, key))
    with EmbeddedNats(directory / "nats", config_file=config, scheme="tls") as server:
        yield server.url, directory / "keys", bundle


async def test_a_service_answers_over_tls_with_the_ca(tls_bus: tuple[str, Path, Path]) -> None:
    url, keys, bundle = tls_bus
    assert url.startswith("tls://")
    broker = await start_broker(url, "cluster_state", credentials=BusCredentials.of(keys, "cluster_state", bundle))
    cli = await connect(url, "nrt-health", credentials=BusCredentials.of(keys, "nrt", bundle))
    try:
        ctx = ServiceContext(name="cluster_state", settings=Settings(nats_url=url), broker=broker)
        await serve_health(ctx)
        answer = await rpc.request(cli, health_subject("cluster_state"), HealthQuery(), Health, timeout=5)
        assert answer.service == "cluster_state"
        assert cli.connected_url is not None
        assert cli.connected_url.scheme == "tls"
    finally:
        await cli.close()
        await broker.stop()


async def test_a_client_without_the_ca_is_refused(tls_bus: tuple[str, Path, Path]) -> None:
    url, keys, _ = tls_bus
    with pytest.raises(ssl.SSLCertVerificationError):  # the system's trust store knows no such CA
        await nats.connect(
            url, nkeys_seed=str(keys / "nrt.nk"), allow_reconnect=False, max_reconnect_attempts=0, connect_timeout=2
        )
