"""`nrt status` shows each model's sessions and the KV bytes they hold, per worker."""

from __future__ import annotations

import httpx
import pytest
from click.testing import CliRunner

from nrt.entrypoints.cli import client

STATE = {
    "cluster": "demo",
    "manifest_version": 1,
    "workers": {},
    "models": {
        "billing": {
            "model_id": "billing",
            "requests": 3,
            "placements": {"w1": {"tier": "resident", "bytes_held": 10**9}},
        }
    },
    "sessions": {
        "a": {"session_id": "a", "model_id": "billing", "worker_id": "w1", "kv_bytes": 2 * 10**6, "kv_evicted": False},
        "b": {"session_id": "b", "model_id": "billing", "worker_id": "w1", "kv_bytes": 10**6, "kv_evicted": False},
        "c": {"session_id": "c", "model_id": "billing", "worker_id": "w1", "kv_bytes": 0, "kv_evicted": True},
    },
    "counters": {},
}


def test_status_shows_sessions_and_their_kv_per_model(monkeypatch: pytest.MonkeyPatch) -> None:
    def get(url: str, **_: object) -> httpx.Response:
        return httpx.Response(200, json=STATE, request=httpx.Request("GET", url))

    monkeypatch.setattr(httpx, "get", get)
    result = CliRunner().invoke(client.status, ["--url", "http://gateway.test", "--api-key", "k"])
    assert result.exit_code == 0, result.output
    row = next(line for line in result.output.splitlines() if line.startswith("billing"))
    assert row.endswith("2 (3 MB)"), row  # two sessions hold KV (the evicted one does not), 3 MB in all
    assert "sessions 3 (KV 3 MB)" in result.output


def test_status_shows_what_each_worker_runs_its_models_on(monkeypatch: pytest.MonkeyPatch) -> None:
    h100 = {"kind": "cuda", "id": "GPU-1", "name": "NVIDIA H100", "total_bytes": 80 * 10**9}
    cpu = {"kind": "cpu", "id": "cpu", "name": "AMD EPYC", "total_bytes": 16 * 10**9}
    workers = {
        "w1": {"worker_id": "w1", "alive": True, "cpu_count": 16, "ram_bytes": 64 * 10**9, "device": h100},
        "w2": {"worker_id": "w2", "alive": True, "cpu_count": 2, "ram_bytes": 16 * 10**9, "device": cpu},
    }

    def get(url: str, **_: object) -> httpx.Response:
        return httpx.Response(200, json={**STATE, "workers": workers}, request=httpx.Request("GET", url))

    monkeypatch.setattr(httpx, "get", get)
    result = CliRunner().invoke(client.status, ["--url", "http://gateway.test", "--api-key", "k"])
    assert result.exit_code == 0, result.output
    lines = [" ".join(line.split()) for line in result.output.splitlines() if line.startswith("worker ")]
    assert lines == [
        "worker w1 up 16 cpus, 64 GB ram, cuda NVIDIA H100 (80 GB)",
        "worker w2 up 2 cpus, 16 GB ram, cpu",
    ]
