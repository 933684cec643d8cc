"""cluster_state driving the real specialist worker: placement, warming, budgets, session LRU, lost workers.

The workers are the real service code with real tiny ONNX models (each specialist on its
own copy of the tiny Llama export, so every model has bytes of its own). The events a
router and a gateway would publish (RequestRouted, RequestCompleted) are published by the
test; everything else is cluster_state and the workers talking over NATS (the entry model on
a router host: the same worker code router_svc runs).
"""

from __future__ import annotations

import asyncio
from collections.abc import Callable

import pytest
from nats.aio.client import Client

from nrt.adapters.bus import rpc, subjects
from nrt.adapters.bus.errors import RemoteError
from nrt.adapters.bus.jetstream import EventPublisher
from nrt.adapters.store import EventStore
from nrt.core.events import ModelPlaced, SessionKvEvicted, TierChanged, WorkerLost
from nrt.core.protocol import PromoteModel, PromoteResult
from nrt.core.vocabulary import Reason, WorkerRole
from state_services import OnOneWorker, StartService, Workers
from worker_helpers import ALL_PLACED, FAST, fired, generate, placed_as, tier_changes, tiers, used, worker_manifest


async def test_models_are_placed_on_the_live_workers_of_their_role_at_their_declared_tiers(
    nc: Client,
    workers: Workers,
    start_cluster_state: StartService,
    llama_copies: Callable[[str], str],
    event_store: EventStore,
) -> None:
    await workers.start("w1")
    await workers.start("r1", role=WorkerRole.ROUTER)
    service = await start_cluster_state(manifest_text=worker_manifest(llama_copies), tuning=FAST)
    state = await service.controller.wait_for(placed_as(ALL_PLACED), within=60)
    assert all(p.bytes_held > 0 for m in state.models.values() for p in m.placements.values())
    assert (state.workers["r1"].role, state.workers["w1"].role) == ("router", "specialist")
    placed = await event_store.query(types=["ModelPlaced"])
    assert sorted((r.event.model_id, r.event.worker_id, r.event.tier) for r in placed) == [  # type: ignore[union-attr]
        ("billing", "w1", "resident"),
        ("legal", "w1", "standby"),
        ("router", "r1", "resident"),  # the entry model on the router host
        ("technical", "w1", "resident"),
    ]
    changes = await tier_changes(event_store)
    assert ("legal", "unloaded", "standby", "placement") in changes
    assert ("router", "standby", "resident", "placement") in changes
    chunks = await generate(nc, "billing")  # the placed model serves
    assert chunks[-1].finish_reason in ("stop", "length")


async def test_a_router_hit_warms_the_co_activated_model_once_demoting_the_lru_one(
    nc: Client, llama_copies: Callable[[str], str], event_store: EventStore, on_one_worker: OnOneWorker
) -> None:
    service = await on_one_worker(worker_manifest(llama_copies, gpu="3GB"))
    publisher = EventPublisher(nc)
    await publisher.publish(used("technical"))
    await publisher.publish(used("billing"))  # technical is now the least recently used non-critical resident
    await publisher.publish(used("router"))
    for _ in range(5):  # a burst of router hits: one promotion
        await publisher.publish(fired())
    expected = {**ALL_PLACED, "legal": {"w1": "resident"}, "technical": {"w1": "standby"}}
    await service.controller.wait_for(placed_as(expected), within=30)
    await asyncio.sleep(1.0)  # any duplicate promotion would be recorded by now
    changes = await tier_changes(event_store)
    warm = [c for c in changes if c[3] in ("co_activation", "budget_pressure")]
    assert warm == [
        ("technical", "resident", "standby", "budget_pressure"),
        ("legal", "standby", "resident", "co_activation"),
    ]


async def test_budget_pressure_never_demotes_a_critical_model_the_promotion_is_refused_with_numbers(
    nc: Client, llama_copies: Callable[[str], str], event_store: EventStore, on_one_worker: OnOneWorker
) -> None:
    manifest = worker_manifest(llama_copies, critical=("router", "billing", "technical"))
    service = await on_one_worker(manifest)
    with pytest.raises(RemoteError) as refused:
        await rpc.request(nc, subjects.PROMOTE, PromoteModel(model_id="legal"), PromoteResult, timeout=30)
    assert refused.value.status == 503
    assert refused.value.code == "budget_exhausted"
    assert "cannot make legal resident (1 GB): residents would hold 4 GB of gpu_budget 3 GB" in refused.value.message
    assert "billing, router, technical are critical" in refused.value.message
    assert tiers(service.controller.cluster) == ALL_PLACED
    # with room in the budget the same request promotes it
    with pytest.raises(RemoteError) as unknown:
        await rpc.request(nc, subjects.PROMOTE, PromoteModel(model_id="nope"), PromoteResult, timeout=30)
    assert unknown.value.status == 404


async def test_promote_request_demotes_the_lru_model_and_answers_when_done(
    nc: Client, llama_copies: Callable[[str], str], on_one_worker: OnOneWorker
) -> None:
    service = await on_one_worker(worker_manifest(llama_copies))
    await EventPublisher(nc).publish(used("technical"))
    await service.controller.wait_for(lambda s: s.models["technical"].last_used_at is not None, within=10)
    result = await rpc.request(nc, subjects.PROMOTE, PromoteModel(model_id="legal"), PromoteResult, timeout=30)
    assert (result.model_id, result.worker_id, result.tier, result.demoted) == ("legal", "w1", "resident", ("billing",))
    await service.controller.wait_for(placed_as({"legal": {"w1": "resident"}, "billing": {"w1": "standby"}}), within=10)


async def test_an_idle_session_loses_its_kv_on_the_worker_and_a_young_one_keeps_it(
    nc: Client, llama_copies: Callable[[str], str], event_store: EventStore, on_one_worker: OnOneWorker
) -> None:
    lru = "{idle_threshold: 1s, min_lifetime: 3s, sweep_interval: 0.5s}"
    service = await on_one_worker(worker_manifest(llama_copies, lru=lru))
    await generate(nc, "billing", session_id="old")
    await service.controller.wait_for(lambda s: "old" in s.sessions and s.sessions["old"].kv_bytes > 0, within=10)
    await asyncio.sleep(2.5)
    await generate(nc, "billing", session_id="young")  # idle soon, but younger than min_lifetime
    state = await service.controller.wait_for(lambda s: s.sessions["old"].kv_evicted, within=10)
    await asyncio.sleep(1.5)  # "young" is now idle past the threshold, but only ~1.5s old
    state = service.controller.cluster
    assert state.sessions["old"].kv_evicted
    assert not state.sessions["young"].kv_evicted
    assert state.sessions["young"].kv_bytes > 0
    evicted = [r.event for r in await event_store.query(types=["SessionKvEvicted"])]
    assert [(e.session_id, e.reason) for e in evicted if isinstance(e, SessionKvEvicted)] == [("old", "idle")]
    assert tiers(state)["billing"] == {"w1": "resident"}  # the weights stay resident
    # the next turn of the evicted session still works (prefilled again)
    assert (await generate(nc, "billing", session_id="old"))[-1].finish_reason in ("stop", "length")


async def test_a_worker_that_stops_heartbeating_is_lost_and_its_models_move(
    nc: Client,
    workers: Workers,
    start_cluster_state: StartService,
    llama_copies: Callable[[str], str],
    event_store: EventStore,
) -> None:
    await workers.start("w1")
    w2 = await workers.start("w2")
    await workers.start("r1", role=WorkerRole.ROUTER)
    service = await start_cluster_state(manifest_text=worker_manifest(llama_copies, gpu="8GB"), tuning=FAST)
    state = await service.controller.wait_for(
        lambda s: (
            len(tiers(s)) == 4 and all(t in ("resident", "standby") for m in tiers(s).values() for t in m.values())
        ),
        within=60,
    )
    on_w2 = sorted(m for m, where in tiers(state).items() if "w2" in where)
    assert on_w2, "placement spreads the models over both workers"
    await w2.crash()
    expected = {m: ({"w1": where["w1"]} if "w1" in where else where) for m, where in ALL_PLACED.items()}
    state = await service.controller.wait_for(placed_as(expected), within=30)
    assert not state.workers["w2"].alive
    lost = [r.event for r in await event_store.query(types=["WorkerLost"])]
    assert [(e.worker_id, e.reason) for e in lost if isinstance(e, WorkerLost)] == [("w2", "heartbeat_timeout")]
    moved = [r.event for r in await event_store.query(types=["ModelPlaced"])][-len(on_w2) :]
    assert sorted(e.model_id for e in moved) == on_w2  # type: ignore[union-attr]
    assert {e.worker_id for e in moved} == {"w1"}  # type: ignore[union-attr]


async def test_a_request_for_a_standby_model_is_promoted_within_the_budget_or_refused_with_the_reason(
    nc: Client, llama_copies: Callable[[str], str], on_one_worker: OnOneWorker
) -> None:
    manifest = worker_manifest(llama_copies, critical=("router", "billing", "technical"))
    service = await on_one_worker(manifest)
    # the budget is full of critical residents: the request gets cluster_state's 503 and its numbers
    with pytest.raises(RemoteError) as refused:
        await generate(nc, "legal")
    assert (refused.value.status, refused.value.code) == (503, "budget_exhausted")
    assert "cannot make legal resident (1 GB)" in refused.value.message
    assert "billing, router, technical are critical" in refused.value.message
    assert tiers(service.controller.cluster)["legal"] == {"w1": "standby"}


async def test_a_request_for_a_standby_model_makes_room_by_demoting_the_lru_model_first(
    nc: Client, llama_copies: Callable[[str], str], event_store: EventStore, on_one_worker: OnOneWorker
) -> None:
    service = await on_one_worker(worker_manifest(llama_copies))
    await EventPublisher(nc).publish(used("technical"))  # billing is now the least recently used
    await service.controller.wait_for(lambda s: s.models["technical"].last_used_at is not None, within=10)
    chunks = await generate(nc, "legal")
    assert chunks[-1].finish_reason in ("stop", "length")
    assert chunks[0].cold_start_ms is not None
    assert chunks[0].cold_start_ms > 0
    state = await service.controller.wait_for(placed_as({"legal": {"w1": "resident"}}), within=10)
    assert tiers(state)["billing"] == {"w1": "standby"}
    changes = await tier_changes(event_store)
    demoted = changes.index(("billing", "resident", "standby", "budget_pressure"))
    promoted = changes.index(("legal", "standby", "resident", "on_demand"))
    assert demoted < promoted  # room was made before the model was promoted, never over budget
    cold = [r.event for r in await event_store.query(types=["TierChanged"]) if r.event.model_id == "legal"]
    assert any(getattr(e, "cold_start", False) for e in cold)


async def test_a_worker_declared_lost_while_it_holds_its_models_converges_back_without_a_command_loop(
    nc: Client, llama_copies: Callable[[str], str], event_store: EventStore, on_one_worker: OnOneWorker
) -> None:
    """The log says w1 is gone (a long load held up its heartbeats, say) but it still holds every model:
    w1 beats again, is re-joined, is told to load what it holds, answers with its real state, and the
    placements come back; no load is repeated after that."""
    service = await on_one_worker(worker_manifest(llama_copies))
    await EventPublisher(nc).publish(WorkerLost(worker_id="w1", reason=Reason.HEARTBEAT_TIMEOUT))
    await service.controller.wait_for(lambda s: not [m for m, where in tiers(s).items() if "w1" in where], within=10)
    await service.controller.wait_for(placed_as(ALL_PLACED), within=30)
    settled = await event_store.head()
    await asyncio.sleep(3 * FAST.retry_s)  # any re-issued load would have been recorded by now
    later = [r.event async for r in event_store.read_positions(settled + 1)]
    assert [e for e in later if isinstance(e, TierChanged | ModelPlaced)] == []
    assert tiers(service.controller.cluster) == ALL_PLACED
