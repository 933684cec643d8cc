"""Fault: the stack's NATS server is killed (SIGKILL) under traffic.

`nrt up` starts it again on the same port and store; every service reconnects by itself. While
it is down, requests fail fast with a 503; within 15 s of the kill the stack serves again; no
event of a request is lost or stored twice (events emitted during the outage are kept and sent
again); the hash chain is intact; the replayed log equals the live state; and nothing repeats
a command in a loop afterwards (issue 19: a ModelPlaced every 10 s, for ever).
"""

from __future__ import annotations

import asyncio
import os
import signal
import time
from collections import Counter

import httpx
import psycopg

from fault_kit import FaultStack, Traffic, live_state, report, served
from nrt.adapters.infra.pgurl import to_libpq
from nrt.entrypoints.stack.endpoints import stack_dir

SERVE_AGAIN_WITHIN_S = 15.0
FAIL_FAST_S = 5.0


def placements(stack: FaultStack) -> int:
    with psycopg.connect(to_libpq(stack.endpoints.database_url), autocommit=True) as conn:
        row = conn.execute("SELECT count(*) FROM events WHERE type = 'ModelPlaced'").fetchone()
    assert row is not None
    return int(row[0])


async def test_nats_killed_under_traffic_comes_back_and_the_stack_serves_within_15s(fault_stack: FaultStack) -> None:
    pid_file = stack_dir() / "nats" / "nats-server.pid"
    nats_pid = int(pid_file.read_text())
    traffic = Traffic(fault_stack.url, headers=fault_stack.headers, concurrency=2, stream=False)
    traffic.start()
    await asyncio.sleep(3)
    placed_before = placements(fault_stack)
    killed_at = time.monotonic()
    os.kill(nats_pid, signal.SIGKILL)
    await asyncio.sleep(SERVE_AGAIN_WITHIN_S + 5)  # the outage, the recovery, then traffic as usual
    outcomes = await traffic.stop()

    # answered before the kill; the rest (in flight at the kill, or sent after it) meet the outage
    before = [o for o in outcomes if o.sent_at + o.took_s < killed_at]
    after = [o for o in outcomes if o.sent_at + o.took_s >= killed_at]
    assert before
    assert all(served(o) for o in before), Counter((o.status, o.code) for o in before)
    failed = [o for o in after if not served(o)]
    first_ok = next((i for i, o in enumerate(after) if served(o) and all(served(later) for later in after[i:])), None)
    assert first_ok is not None, (
        [(round(o.sent_at - killed_at, 2), round(o.took_s, 2), o.status, o.code) for o in failed],
        fault_stack.log.read_text()[-4000:],
    )
    serving_again = after[first_ok].sent_at + after[first_ok].took_s - killed_at
    assert serving_again <= SERVE_AGAIN_WITHIN_S
    for o in failed:  # a clear, fast error: never a hang, never a 500
        assert o.status == 503, o
        assert o.took_s <= FAIL_FAST_S, o
    assert pid_file.read_text().strip() != str(nats_pid)

    log = await asyncio.to_thread(fault_stack.check_log, outcomes)

    # the cluster converged and nothing repeats: no placement loop
    models = (await asyncio.to_thread(live_state, fault_stack.url, fault_stack.admin_headers))["models"]
    assert all(m["placements"] for m in models.values()), models
    placed_after = placements(fault_stack)
    await asyncio.sleep(12)  # longer than a pending command's settle time (10 s)
    assert placements(fault_stack) == placed_after
    assert placed_after - placed_before <= len(models)  # at most one re-placement per model
    async with httpx.AsyncClient(timeout=5) as client:
        assert (await client.get(f"{fault_stack.url}/readyz")).status_code == 200
    report(
        "nats-sigkill",
        {
            "serving_again_s": round(serving_again, 1),
            "failed_after_kill": f"{len(failed)}/{len(after)}",
            "failures": dict(Counter((o.status, o.code) for o in failed)),
            "slowest_failure_s": round(max((o.took_s for o in failed), default=0.0), 2),
            "request_events_checked": log.events_checked,
            "chain_events": log.chain_events,
        },
    )
