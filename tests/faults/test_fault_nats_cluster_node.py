"""Fault: one server of the stack's 3-server NATS cluster (`nrt up --nats-cluster 3`) is killed (SIGKILL) under
traffic: the one leading the events stream.

The events stream is kept in three copies, so it keeps its quorum and elects another leader; every service
was given the three servers and reconnects to another one by itself; requests in flight on the killed
server's connections fail fast (503), and new ones are served within 2 s of the kill; every request is
in the log once with the outcome its client saw, the hash chain is intact and the replayed log equals
the live state. `nrt up` starts the killed server again on its port and store, and it rejoins (it may be
elected the stream's leader again).
"""

from __future__ import annotations

import asyncio
import os
import signal
import time
from collections import Counter
from datetime import UTC, datetime

import pytest

from fault_kit import FaultStack, Traffic, report, served
from nrt.adapters.bus import subjects
from nrt.adapters.bus.connection import connect
from nrt.adapters.bus.credentials import BusCredentials
from nrt.adapters.bus.servers import parse_servers
from nrt.entrypoints.stack.bus import BUS_DIR
from nrt.entrypoints.stack.endpoints import stack_dir

SERVE_AGAIN_WITHIN_S = 2.0
FAIL_FAST_S = 5.0


@pytest.fixture
def nrt_up_options() -> list[str]:
    return ["--nats-cluster", "3"]


def server_pid(server_name: str) -> int:
    """The pid of the stack's NATS server ``nrt-<i>`` (its data directory ``nats-cluster/node-<i>``)."""
    index = server_name.rsplit("-", 1)[1]
    return int((stack_dir() / "nats-cluster" / f"node-{index}" / "nats-server.pid").read_text())


async def test_the_stream_leaders_server_killed_under_traffic_serves_again_within_2s(fault_stack: FaultStack) -> None:
    servers = parse_servers(fault_stack.endpoints.nats_url)
    assert len(servers) == 3  # every service got the three servers
    nc = await connect(
        fault_stack.endpoints.nats_url, "fault-test", credentials=BusCredentials.of(stack_dir() / BUS_DIR, "nrt")
    )
    js = nc.jetstream()
    info = await js.stream_info(subjects.EVENTS_STREAM)
    assert info.config.num_replicas == 3
    assert info.cluster is not None
    leader = info.cluster.leader
    assert leader is not None
    victim = server_pid(leader)

    traffic = Traffic(fault_stack.url, headers=fault_stack.headers, concurrency=2, stream=False)
    traffic.start()
    await asyncio.sleep(3)
    killed_at, killed_wall = time.monotonic(), datetime.now(UTC)
    os.kill(victim, signal.SIGKILL)
    await asyncio.sleep(8)
    outcomes = await traffic.stop()

    info = await js.stream_info(subjects.EVENTS_STREAM)  # the quorum answers, with a leader elected since the kill
    assert info.cluster is not None
    assert info.cluster.leader is not None
    assert info.cluster.leader_since is not None
    assert info.cluster.leader_since > killed_wall  # (the killed server, started again, may have been elected)
    await nc.close()

    before = [o for o in outcomes if o.sent_at + o.took_s < killed_at]
    after = [o for o in outcomes if o.sent_at + o.took_s >= killed_at]
    assert before
    assert all(served(o) for o in before), Counter((o.status, o.code) for o in before)
    failed = [o for o in after if not served(o)]
    for o in failed:  # a clear, fast error: never a hang, never a 500
        assert o.status == 503, o
        assert o.took_s <= FAIL_FAST_S, o
    # served again: every request answered after the last failure's answer is served, and that came within 2 s
    serving_again = max((o.sent_at + o.took_s - killed_at for o in failed), default=0.0)
    later = [o for o in after if o.sent_at - killed_at > serving_again]
    assert later
    assert all(served(o) for o in later), [(round(o.sent_at - killed_at, 2), o.status, o.code) for o in failed]

    log = await asyncio.to_thread(fault_stack.check_log, outcomes)
    report(
        "nats-cluster-node-sigkill",
        {
            "killed": f"{leader} (stream leader)",
            "new_leader": info.cluster.leader,
            "serving_again_s": round(serving_again, 2),
            "failed_after_kill": f"{len(failed)}/{len(after)}",
            "failures": dict(Counter((o.status, o.code) for o in failed)),
            "request_events_checked": log.events_checked,
            "chain_events": log.chain_events,
        },
    )
    assert serving_again <= SERVE_AGAIN_WITHIN_S
    assert server_pid(leader) != victim  # `nrt up` started it again
