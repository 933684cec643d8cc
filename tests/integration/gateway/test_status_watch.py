"""``nrt status --watch``: the cluster redrawn live in the terminal, against the real stack with cluster_state."""

from __future__ import annotations

import asyncio
import time

from click.testing import CliRunner

from harness import API_KEY, start_stack
from nrt.adapters.store import EventStore
from nrt.entrypoints.cli.client import status


async def test_status_watch_redraws_the_cluster(
    nats_url: str, nrt_home: object, database_url: str, event_store: EventStore
) -> None:
    async with start_stack(nats_url, "tiny-support.yaml", database_url=database_url) as stack, stack.http() as http:
        declared = {spec.id for spec in stack.manifest.models}
        deadline = time.monotonic() + 30
        while {m for m in (await http.get("/v1/cluster")).json()["models"]} != declared:
            assert time.monotonic() < deadline, "cluster_state did not place every model"
            await asyncio.sleep(0.2)
        await stack.client().chat.completions.create(
            model="router",
            messages=[{"role": "user", "content": "I was charged twice for my order"}],
            max_tokens=3,
            extra_headers={"X-NRT-Session": "watch-session"},
        )
        while "watch-session" not in (await http.get("/v1/cluster")).json()["sessions"]:
            assert time.monotonic() < deadline, "cluster_state did not record the session"
            await asyncio.sleep(0.2)
        args = ["--url", stack.base_url, "--api-key", API_KEY, "--watch", "--interval", "0.2", "--count", "3"]
        started = time.monotonic()
        result = await asyncio.to_thread(CliRunner().invoke, status, args, terminal_width=160)
        took = time.monotonic() - started
    assert result.exit_code == 0, result.output
    assert took < 10, f"--count 3 --interval 0.2 took {took:.1f}s"
    out = result.output
    assert "cluster tiny-support  manifest v1" in out
    assert "state from cluster_state" in out
    for model_id in declared:
        assert model_id in out
    assert "w-gateway" in out
    assert "r-gateway" in out
    assert "resident" in out
    assert "standby" in out
    assert "gpu_budget (none)" in out
    assert "watch-session" in out
    assert "routed by intent: billing 1" in out


def test_status_watch_refuses_json() -> None:
    result = CliRunner().invoke(status, ["--url", "http://127.0.0.1:9", "--watch", "--json"])
    assert result.exit_code == 2
    assert "--watch draws tables" in result.output
