"""Helpers for the tests that run cluster_state with the real specialist worker."""

from __future__ import annotations

from collections.abc import Callable

from nats.aio.client import Client

from nrt.adapters.bus import rpc, subjects
from nrt.adapters.store import EventStore
from nrt.core.events import RequestCompleted, RequestRouted, TierChanged
from nrt.core.policies import Tuning
from nrt.core.protocol import GenerateChunk, GenerateRequest, SamplingParams
from nrt.core.state import ClusterState

FAST = Tuning(heartbeat_s=0.5, settle_s=5.0, retry_s=2.0)


def worker_manifest(
    copy: Callable[[str], str],
    *,
    gpu: str = "3GB",
    critical: tuple[str, ...] = ("router",),
    lru: str = "{idle_threshold: 60s, min_lifetime: 30s, sweep_interval: 10s}",
    drain: str = "{timeout: 20s, admission_wait: 5s}",
    legal: bool = True,
    contracts: bool = False,
    ram: str = "8GB",
    extra: str = "",
) -> str:
    def model(model_id: str, tier: str, more: str = "") -> str:
        priority = "critical" if model_id in critical else "normal"
        return f"source: {copy(model_id)}\n      tier: {tier}\n      priority: {priority}\n      footprint: 1GB{more}"

    specialists = [
        f"    - id: billing\n      {model('billing', 'resident')}",
        f"    - id: technical\n      {model('technical', 'resident')}",
    ]
    if legal:
        specialists.append(
            f"    - id: legal\n      {model('legal', 'standby', chr(10) + '      co_activation: router')}"
        )
    if contracts:
        specialists.append(f"    - id: contracts\n      {model('contracts', 'standby')}")
    if extra:
        specialists.append(extra.rstrip("\n"))
    router = model("router", "resident").replace("\n      ", "\n    ")
    return (
        "cluster: worker-test\n"
        f"resources:\n  gpu_budget: {gpu}\n  ram_budget: {ram}\n"
        f"models:\n  router:\n    {router}\n  specialists:\n" + "\n".join(specialists) + "\n"
        "routing:\n  entry: router\n  dispatch_rule: router.output.intent -> specialists.{intent}\n"
        f"lru: {lru}\ndrain: {drain}\n"
    )


def tiers(state: ClusterState) -> dict[str, dict[str, str]]:
    return {m.model_id: m.tiers for m in state.models.values() if m.placements}


def placed_as(expected: dict[str, dict[str, str]]) -> Callable[[ClusterState], bool]:
    return lambda state: all(tiers(state).get(model) == where for model, where in expected.items())


async def tier_changes(store: EventStore) -> list[tuple[str, str, str, str]]:
    return [
        (e.model_id, e.from_tier, e.to_tier, e.reason)
        for r in await store.query(types=["TierChanged"], limit=10_000)
        if isinstance(e := r.event, TierChanged)
    ]


async def generate(
    nc: Client, model_id: str, session_id: str | None = None, max_tokens: int = 8
) -> list[GenerateChunk]:
    request = GenerateRequest(
        request_id=f"r-{model_id}-{session_id}",
        model_id=model_id,
        manifest_version=1,
        prompt="The quick brown fox",
        params=SamplingParams(max_tokens=max_tokens),
        session_id=session_id,
    )
    return [c async for c in rpc.stream(nc, subjects.infer(model_id), request, GenerateChunk, 30, 10)]


def used(model_id: str) -> RequestCompleted:
    return RequestCompleted(
        request_id=f"done-{model_id}",
        manifest_version=1,
        model_id=model_id,
        prompt_tokens=3,
        completion_tokens=3,
        latency_ms=5.0,
    )


def fired() -> RequestRouted:
    """The router classified a request for billing and dispatched it there, as router_svc records it."""
    return RequestRouted(
        request_id="q",
        manifest_version=1,
        model_id="router",
        worker_id="r1",
        intent="billing",
        scores={"billing": 0.9},
        confidence=0.9,
        threshold=0.5,
        target="billing",
        rule="router.output.intent -> specialists.{intent} => billing",
        latency_ms=1.0,
    )


ALL_PLACED = {  # the entry model on router host r1, the specialists on worker w1
    "router": {"r1": "resident"},
    "billing": {"w1": "resident"},
    "technical": {"w1": "resident"},
    "legal": {"w1": "standby"},
}
