"""cluster_state killed with SIGKILL under 8 concurrent clients: requests keep being served.

`nrt up` restarts it; the recorder resumes from its checkpoint, JetStream redelivers what it
had not acknowledged and the store drops what it already held (idempotent event ids): every
request is in the log exactly once, the chain is intact and the replay equals the live state.
"""

from __future__ import annotations

import asyncio
import os
import signal
import time

from fault_kit import FaultStack, Traffic, eventually, report, served
from nrt.entrypoints.cli.up import SERVICES
from nrt.testing.processes import python_services


async def test_cluster_state_killed_under_load_loses_no_request_and_no_event(fault_stack: FaultStack) -> None:
    traffic = Traffic(fault_stack.url, headers=fault_stack.headers, concurrency=8)
    traffic.start()
    await asyncio.sleep(3)
    before = python_services(fault_stack.process.pid, SERVICES)
    os.kill(before["cluster_state"], signal.SIGKILL)
    killed_at = time.monotonic()

    def restarted() -> int | None:
        pid = python_services(fault_stack.process.pid, SERVICES).get("cluster_state")
        return pid if pid is not None and pid != before["cluster_state"] else None

    await asyncio.to_thread(eventually, restarted, 30, "nrt up restarts cluster_state")
    back_after = time.monotonic() - killed_at
    await asyncio.sleep(5)
    outcomes = await traffic.stop()

    failed = [o for o in outcomes if not served(o)]
    after_kill = [o for o in outcomes if o.sent_at >= killed_at]
    assert len(after_kill) >= 8
    assert failed == [], f"{len(failed)} of {len(outcomes)} requests failed: {failed[:5]}"
    log = await asyncio.to_thread(fault_stack.check_log, outcomes)
    report(
        "cluster_state-sigkill",
        {
            "requests": log.requests,
            "served": log.served,
            "after_kill": len(after_kill),
            "restarted_after_s": round(back_after, 1),
            "request_events_checked": log.events_checked,
            "chain_events": log.chain_events,
        },
    )
