"""Shared prefixes' KV in the fold and the budget: held from PrefixKvStored until PrefixKvEvicted, the
model leaving resident or its worker lost; counted against the resident budget like session KV."""

from __future__ import annotations

from cluster_helpers import applied, at, joined, manifest, placed, view
from nrt.core.events import PrefixKvEvicted, PrefixKvStored, TierChanged, WorkerLost, decode, encode
from nrt.core.policies.budget import holdings, tier_total
from nrt.core.state import prefix_id

KV = 200 * 10**6


def cluster() -> list:
    m = manifest()
    return [applied(m), joined("w1"), *placed("router", "w1", "resident"), *placed("billing", "w1", "resident")]


def stored(key: str = "abc", when: float = 2) -> PrefixKvStored:
    return PrefixKvStored(
        occurred_at=at(when), model_id="billing", worker_id="w1", prefix_key=key, tokens=288, kv_bytes=KV
    )


def test_the_events_round_trip() -> None:
    evicted = PrefixKvEvicted(
        occurred_at=at(3),
        model_id="billing",
        worker_id="w1",
        prefix_key="abc",
        bytes_freed=KV,
        reason="prefix_cache_full",
    )
    for event in (stored(), evicted):
        assert decode(encode(event)) == event
    assert stored().stream_id == "prefix:w1/billing/abc"


def test_a_stored_prefix_counts_against_the_resident_budget_until_evicted() -> None:
    m = manifest()
    without = tier_total(holdings(view(cluster(), now=at(3)), m), "resident")
    held = view([*cluster(), stored("a"), stored("b")], now=at(3))
    assert set(held.cluster.prefixes) == {prefix_id("w1", "billing", "a"), prefix_id("w1", "billing", "b")}
    assert held.cluster.prefixes[prefix_id("w1", "billing", "a")].tokens == 288
    assert tier_total(holdings(held, m), "resident") == without + 2 * KV
    evicted = PrefixKvEvicted(
        occurred_at=at(4),
        model_id="billing",
        worker_id="w1",
        prefix_key="a",
        bytes_freed=KV,
        reason="prefix_cache_full",
    )
    after = view([*cluster(), stored("a"), stored("b"), evicted], now=at(5))
    assert list(after.cluster.prefixes) == [prefix_id("w1", "billing", "b")]
    assert tier_total(holdings(after, m), "resident") == without + KV
    assert after.cluster.counters.kv_evictions == 1


def test_prefixes_go_with_their_model_leaving_resident_or_their_worker() -> None:
    demoted = TierChanged(
        occurred_at=at(4),
        model_id="billing",
        worker_id="w1",
        from_tier="resident",
        to_tier="standby",
        reason="budget_pressure",
        elapsed_ms=1.0,
        bytes_held=1,
    )
    assert view([*cluster(), stored(), demoted], now=at(5)).cluster.prefixes == {}
    lost = WorkerLost(occurred_at=at(4), worker_id="w1", reason="heartbeat_timeout")
    assert view([*cluster(), stored(), lost], now=at(5)).cluster.prefixes == {}
