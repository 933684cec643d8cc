"""PostgreSQL frozen (SIGSTOP) for 30 s under 8 concurrent clients: the cluster keeps serving.

Requests never wait on PostgreSQL: events travel through JetStream and the recorder stores
them when the database answers again. Afterwards every request is in the log exactly once,
the chain is intact and the replay equals the live state.
"""

from __future__ import annotations

import asyncio
import os
import signal
import statistics
import time

from fault_kit import FaultStack, Traffic, report, served
from nrt.testing.processes import descendants, executable_name

FROZEN_S = 30.0


def postgres_processes(root: int) -> list[int]:
    return sorted(pid for pid in descendants(root) if executable_name(pid) == "postgres")


async def test_postgres_frozen_for_30s_loses_no_request_and_no_event(fault_stack: FaultStack) -> None:
    traffic = Traffic(fault_stack.url, headers=fault_stack.headers, concurrency=8)
    traffic.start()
    await asyncio.sleep(3)
    frozen = postgres_processes(fault_stack.process.pid)
    assert frozen, "no postgres process below nrt up"
    for pid in frozen:
        os.kill(pid, signal.SIGSTOP)
    froze_at = time.monotonic()
    try:
        await asyncio.sleep(FROZEN_S)
    finally:
        for pid in frozen:
            os.kill(pid, signal.SIGCONT)
    thawed_at = time.monotonic()
    await asyncio.sleep(5)
    outcomes = await traffic.stop()

    during = [o for o in outcomes if froze_at <= o.sent_at < thawed_at]
    failed = [o for o in outcomes if not served(o)]
    assert len(during) >= 8, f"only {len(during)} requests were sent while PostgreSQL was frozen"
    assert failed == [], f"{len(failed)} of {len(outcomes)} requests failed: {failed[:5]}"
    log = await asyncio.to_thread(fault_stack.check_log, outcomes)
    latencies = sorted(o.took_s for o in during)
    report(
        "postgres-sigstop-30s",
        {
            "requests": log.requests,
            "served": log.served,
            "during_freeze": len(during),
            "p50_during_ms": round(statistics.median(latencies) * 1000, 1),
            "max_during_ms": round(latencies[-1] * 1000, 1),
            "request_events_checked": log.events_checked,
            "chain_events": log.chain_events,
        },
    )
