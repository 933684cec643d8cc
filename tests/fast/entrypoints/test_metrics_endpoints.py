"""`nrt up` gives each service but the gateway a metrics port and lists every metrics URL in endpoints.json."""

from __future__ import annotations

import os
from pathlib import Path

import msgspec

from nrt.entrypoints.cli.up import SERVICES, metrics_ports, metrics_urls
from nrt.entrypoints.stack import endpoints


def test_each_service_but_the_gateway_gets_its_own_metrics_port() -> None:
    ports = metrics_ports()
    assert set(ports) == set(SERVICES) - {"api_gateway"}
    assert len(set(ports.values())) == len(ports)
    urls = metrics_urls("127.0.0.1", "http://127.0.0.1:8080", ports)
    assert urls["api_gateway"] == "http://127.0.0.1:8080/metrics"
    assert urls["cluster_state"] == f"http://127.0.0.1:{ports['cluster_state']}/metrics"


def test_endpoints_carry_the_metrics_urls_and_an_older_file_still_decodes(tmp_path: Path) -> None:
    urls = {"api_gateway": "http://127.0.0.1:8080/metrics"}
    found = endpoints.Endpoints(nats_url="n", database_url="d", gateway_url="g", pid=os.getpid(), metrics=urls)
    endpoints.write(found, tmp_path)
    assert endpoints.discover(tmp_path) == found
    older = {"nats_url": "n", "database_url": "d", "gateway_url": "g", "pid": os.getpid()}
    (tmp_path / endpoints.ENDPOINTS_FILE).write_bytes(msgspec.json.encode(older))
    discovered = endpoints.discover(tmp_path)
    assert discovered is not None
    assert discovered.metrics == {}
