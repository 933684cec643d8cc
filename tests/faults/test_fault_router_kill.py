"""Two gateways and two router_svc (one queue group on ``nrt.route``), each its own process: traffic through
both gateways is answered and every request is accounted once in the log; one router_svc killed with
SIGKILL under that traffic loses nothing: the requests it held end fast (served through the other, or a
clear error) and are recorded, and new requests are served by the other router_svc.

So that the killed router_svc surely holds requests, it is paused (SIGSTOP) for a moment first: what the
queue group gives it meanwhile waits in its socket, and dies with it."""

from __future__ import annotations

import asyncio
import time
from collections import Counter
from pathlib import Path

from fault_kit import Outcome, Traffic, report, request_events, routings, served
from multi_stack import multi_stack
from nrt.adapters.store import EventStore
from nrt.core.events import RequestRouted

WARM_S = 3.0  # traffic before the kill
PAUSE_S = 1.0  # the router_svc is stopped this long before it is killed
AFTER_S = 6.0  # and after it
FAIL_FAST_S = 10.0  # a request the killed router_svc held ends within this (the route timeout is 30 s)
CLIENTS = 3  # per gateway


async def routed_by(database_url: str) -> dict[str, str]:
    """For each routed request in the log: the router host (a router_svc instance) that classified it."""
    store = EventStore.connect(database_url, pool_size=1)
    try:
        return {
            r.event.request_id: r.event.worker_id
            async for r in store.read_positions()
            if isinstance(r.event, RequestRouted)
        }
    finally:
        await store.close()


async def test_two_gateways_two_routers_and_a_router_killed_under_traffic(
    nats_url: str, database_url: str, nrt_home: Path, tmp_path: Path
) -> None:
    async with multi_stack(nats_url, database_url, tmp_path, gateways=2, routers=2) as stack:
        traffic = [Traffic(url, stack.headers, concurrency=CLIENTS, max_tokens=4) for url in stack.gateway_urls]
        for t in traffic:
            t.start()
        await asyncio.sleep(WARM_S)
        paused_at = stack.pause("router_svc-1")
        await asyncio.sleep(PAUSE_S)
        killed_at = stack.kill("router_svc-1")
        await asyncio.sleep(AFTER_S)
        by_gateway = [await t.stop() for t in traffic]
        crashes = list(stack.crashes)
    outcomes: list[Outcome] = [o for some in by_gateway for o in some]

    # both gateways answered
    for url, some in zip(stack.gateway_urls, by_gateway, strict=True):
        assert sum(1 for o in some if served(o)) > 0, f"{url} served nothing"
    # the kill, and nothing else, happened
    assert len(crashes) == 1, crashes
    assert "router_svc-1" in crashes[0]

    # the requests in flight at the kill ended fast: served (by the other router_svc) or a clear error
    in_flight = [o for o in outcomes if o.sent_at < killed_at < o.sent_at + o.took_s]
    held = [o for o in in_flight if o.sent_at >= paused_at]  # sent while it was paused: some went to it
    assert held, "no request was in flight on the paused router_svc when it was killed"
    for o in in_flight:
        assert o.sent_at + o.took_s - killed_at <= FAIL_FAST_S, o
        assert served(o) or (o.status >= 400 and o.code is not None), o
    failed = [o for o in outcomes if not served(o)]
    assert all(o.sent_at < killed_at for o in failed), [o for o in failed if o.sent_at >= killed_at][:3]
    # new requests were served: the first sent after the kill, and every one after it
    after = sorted((o for o in outcomes if o.sent_at >= killed_at), key=lambda o: o.sent_at)
    assert after, "no request was sent after the kill"
    assert all(served(o) for o in after), [o for o in after if not served(o)][:3]
    serving_again = after[0].sent_at + after[0].took_s - killed_at

    # every admitted request is accounted once, with the outcome its client saw
    admitted = {o.request_id: o for o in outcomes if o.request_id is not None}
    assert len(admitted) == sum(1 for o in outcomes if o.request_id is not None), "a request id was reused"
    deadline = time.monotonic() + 60
    while True:
        found = await request_events(database_url)
        missing = [r for r in admitted if sum(found.get(r, Counter()).values()) < 2]
        if not missing:
            break
        assert time.monotonic() < deadline, f"{len(missing)} admitted requests not in the log: {missing[:3]}"
        await asyncio.sleep(0.5)
    for request_id, outcome in admitted.items():
        counts = found[request_id]
        assert counts["RequestAdmitted"] == 1, (request_id, counts)
        assert counts["RequestCompleted"] + counts["RequestFailed"] == 1, (request_id, counts, outcome)
        if served(outcome):
            assert counts["RequestCompleted"] == 1, (request_id, counts, outcome)
            # routed once: a request the killed router_svc held was never routed by it, only by its retry's
            assert routings(counts) == 1, (request_id, counts, outcome)
        else:
            assert counts["RequestFailed"] == 1, (request_id, counts, outcome)
    # both router_svc routed before the kill; after it, only the one left (or the killed one's restart)
    routers = await routed_by(database_url)
    before = {routers[r] for r, o in admitted.items() if o.sent_at + o.took_s < killed_at and r in routers}
    later = {routers[r] for r, o in admitted.items() if o.sent_at >= killed_at and r in routers}
    assert len(before) == 2, before
    assert len(later & before) == 1, (before, later)  # the killed instance routed nothing new
    survivor = later & before
    held_routers = {routers.get(o.request_id or "") for o in held if served(o)}
    assert held_routers <= survivor, (held_routers, survivor)  # what it held went through the other
    strays = set(found) - set(admitted) - stack.probes
    assert not strays, f"request events for requests no client sent: {sorted(strays)[:3]}"

    report(
        "router_svc kill (2 gateways, 2 router_svc)",
        {
            "requests": len(outcomes),
            "served": sum(1 for o in outcomes if served(o)),
            "per_gateway": "/".join(str(len(some)) for some in by_gateway),
            "in_flight_at_kill": len(in_flight),
            "held_by_the_paused_router": len(held),
            "held_ended_within_s": f"{max(o.sent_at + o.took_s - killed_at for o in held):.2f}",
            "failed": len(failed),
            "failed_codes": sorted({str(o.code) for o in failed}),
            "serving_again_s": f"{serving_again:.2f}",
            "routers_after_kill": len(later),
        },
    )
