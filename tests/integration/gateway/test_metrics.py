"""Prometheus metrics after real traffic: the gateway's ``GET /metrics`` and each service's own metrics port.

One in-process stack with cluster_state (real NATS, PostgreSQL, tiny ONNX models): routed
requests (a confident intent, and one that falls back), a direct request to a standby model
(a cold start), a streamed one, one with a session, and a manifest swap (a drain). Then every
service's scrape is parsed with ``prometheus_client``'s own parser, and each family that
service owns must be there with a value; together they are every family ``nrt.adapters.metrics``
defines.
"""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import httpx
import pytest
from prometheus_client import CollectorRegistry
from prometheus_client.parser import text_string_to_metric_families
from prometheus_client.samples import Sample

from harness import ADMIN_KEY, Stack, start_stack
from nrt.adapters.metrics import MetricsServer, defined_families

BILLING = "I was charged twice for my order"  # an intent example: routed with confidence 1.0
BUDGETS = [
    ("cluster: tiny-support\n", "cluster: tiny-support\nresources: {gpu_budget: 2GB, ram_budget: 4GB}\n"),
    # technical stays standby until asked for (co-activation would warm it with the router's first request)
    ("      tier: standby\n      co_activation: router\n", "      tier: standby\n"),
]

# what each service's scrape must show with a value after the traffic below
GATEWAY = {
    "nrt_requests",
    "nrt_request_duration_seconds",
    "nrt_time_to_first_token_seconds",
    "nrt_inter_token_latency_seconds",
    "nrt_tokens",
    "nrt_tier_bytes",
    "nrt_worker_capacity_bytes",
    "nrt_tier_budget_bytes",
}
ROUTER = {"nrt_router_decisions", "nrt_router_confidence", "nrt_model_bytes", "nrt_tier_transitions"}
WORKER = {
    "nrt_tier_transitions",
    "nrt_cold_start_seconds",
    "nrt_batch_size",
    "nrt_queue_depth",
    "nrt_batch_rows",
    "nrt_model_bytes",
}
CLUSTER_STATE = {
    "nrt_event_append_seconds",
    "nrt_events_recorded",
    "nrt_events_rejected",
    "nrt_events_lost",
    "nrt_event_stream_sequence",
    "nrt_event_log_sequence",
    "nrt_event_log_lag",
    "nrt_drain_seconds",
    "nrt_tier_bytes",
    "nrt_worker_capacity_bytes",
    "nrt_tier_budget_bytes",
    "nrt_sessions_live",
    "nrt_sessions_evicted",
}
COUNTED = {  # families whose value must be above zero after the traffic (the rest may rightly be 0)
    "nrt_requests",
    "nrt_tokens",
    "nrt_router_decisions",
    "nrt_tier_transitions",
    "nrt_events_recorded",
    "nrt_sessions_live",
    "nrt_event_stream_sequence",
    "nrt_event_log_sequence",
}


def families(text: str) -> dict[str, list[Sample]]:
    return {family.name: family.samples for family in text_string_to_metric_families(text)}


def value(samples: list[Sample], suffix: str = "") -> float:
    """The sum of a family's samples (of its ``_count`` series for a histogram)."""
    return sum(s.value for s in samples if s.name.endswith(suffix))


def check(scraped: dict[str, list[Sample]], expected: set[str], service: str) -> None:
    for name in sorted(expected):
        samples = scraped.get(name)
        assert samples, f"{service}: no samples of {name} (families: {sorted(scraped)})"
        histogram = any(s.name.endswith("_bucket") for s in samples)
        if histogram:
            assert value(samples, "_count") > 0, f"{service}: {name} observed nothing"
        elif name in COUNTED:
            assert value(samples) > 0, f"{service}: {name} is 0"


@pytest.fixture
def served() -> Iterator[list[MetricsServer]]:
    servers: list[MetricsServer] = []
    yield servers
    for server in servers:
        server.close()


async def scrape_port(registry: CollectorRegistry, servers: list[MetricsServer]) -> dict[str, list[Sample]]:
    """``registry`` served on a metrics port of its own, as ``run_service`` serves it, and scraped."""
    server = MetricsServer(registry, 0, "127.0.0.1")
    servers.append(server)
    async with httpx.AsyncClient() as http:
        answer = await http.get(f"http://127.0.0.1:{server.port}/metrics")
    assert answer.status_code == 200
    return families(answer.text)


async def traffic(stack: Stack) -> None:
    client = stack.client()
    billing = await client.chat.completions.create(model="router", messages=[{"role": "user", "content": BILLING}])
    assert billing.model == "billing"
    other = await client.chat.completions.create(model="router", messages=[{"role": "user", "content": "hello?"}])
    assert other.model == "fallback"
    cold = await client.chat.completions.create(
        model="technical", messages=[{"role": "user", "content": "it crashes"}]
    )  # standby: a cold start
    assert cold.choices[0].message.content is not None
    stream = await client.chat.completions.create(
        model="fallback", stream=True, messages=[{"role": "user", "content": "tell me more"}]
    )
    chunks = [chunk async for chunk in stream]
    assert len(chunks) > 2
    await client.chat.completions.create(
        model="billing",
        messages=[{"role": "user", "content": "my invoice"}],
        extra_headers={"X-NRT-Session": "metrics-session"},
    )
    assert stack.cluster_state is not None
    await stack.cluster_state.controller.wait_for(lambda s: "metrics-session" in s.sessions, within=10)
    manifest = stack.manifest.text.replace("drain: {timeout: 5s", "drain: {timeout: 6s")
    async with stack.http() as http:
        swapped = await http.put(
            "/v1/manifest", content=manifest.encode(), headers={"Authorization": f"Bearer {ADMIN_KEY}"}, timeout=60
        )
    assert swapped.status_code == 200, swapped.text


async def test_every_service_serves_its_metric_families_with_values_after_traffic(
    nats_url: str, nrt_home: Path, database_url: str, served: list[MetricsServer]
) -> None:
    async with start_stack(nats_url, "tiny-support.yaml", database_url=database_url, edit=BUDGETS) as stack:
        await traffic(stack)
        async with httpx.AsyncClient(base_url=stack.base_url) as anonymous:  # open like /healthz: no key
            answer = await anonymous.get("/metrics")
        assert answer.status_code == 200
        assert answer.headers["content-type"].startswith("text/plain")
        gateway = families(answer.text)
        assert stack.cluster_state is not None
        router = await scrape_port(stack.router.registry, served)
        worker = await scrape_port(stack.worker.metrics.registry, served)
        cluster_state = await scrape_port(stack.cluster_state.metrics.registry, served)

    check(gateway, GATEWAY, "api_gateway")
    check(router, ROUTER, "router_svc")
    check(worker, WORKER, "specialist_worker")
    check(cluster_state, CLUSTER_STATE, "cluster_state")
    outcomes = {(s.labels["model"], s.labels["outcome"], s.labels["status"]) for s in gateway["nrt_requests"]}
    assert {("billing", "intent", "200"), ("fallback", "fallback", "200"), ("technical", "direct", "200")} <= outcomes
    decisions = {(s.labels["intent"], s.labels["outcome"]) for s in router["nrt_router_decisions"]}
    assert {("billing", "intent"), ("none", "fallback")} <= decisions
    cold = [s for s in worker["nrt_cold_start_seconds"] if s.name.endswith("_count") and s.value > 0]
    assert [s.labels["model"] for s in cold] == ["technical"]
    drains = [s for s in cluster_state["nrt_drain_seconds"] if s.name.endswith("_count")]
    assert [(s.labels["outcome"], s.value) for s in drains] == [("drained", 1.0)]
    budgets = {s.labels["tier"]: s.value for s in gateway["nrt_tier_budget_bytes"]}
    assert budgets == {"resident": 2e9, "standby": 4e9}
    lag = value(cluster_state["nrt_event_log_lag"])
    assert 0 <= lag <= value(cluster_state["nrt_event_stream_sequence"])
    shown = set(gateway) | set(router) | set(worker) | set(cluster_state)
    assert shown == defined_families(), "a family no service shows, or one nrt.adapters.metrics does not define"
