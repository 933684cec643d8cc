"""A cluster across hosts, for real on one machine (issue 28): faults one after another under traffic.

Four simulated hosts (network namespaces, each with its own address; :mod:`nrt.testing.hosts`):
a 3-node NATS cluster on h1-h3, the test's PostgreSQL reached over the hosts' network, `nrt up` on h1
and h2 (two gateways, two router_svc, two cluster_state, a worker each) and a worker alone on h3 and
h4, each specialist on three of the four workers (so one alone on its host holds it), each process with its own data directory. Traffic goes through both gateways while, in turn,
a gateway is killed, one worker per model is killed, a worker's host is cut off the network (a
partition, then healed), the cluster_state leader is killed, and a NATS node is killed. After each
fault: every admitted request is recorded once with the outcome its client saw, the hash chain is
intact, the replayed log equals the live state; and the time until a request sent after the fault
is served again is measured. The per-fault table is printed (pytest -s) for the closing note.
"""

from __future__ import annotations

import asyncio
import os
import signal
import time
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from pathlib import Path

import pytest

from fault_kit import LogReport, Outcome, Traffic, check_log, request_events, served
from nrt.testing.hosted_cluster import HostedCluster, hosted_cluster, worker_id
from nrt.testing.hosts import unavailable
from nrt.testing.stacks import tiny_manifest

pytestmark = [
    pytest.mark.cluster,
    pytest.mark.skipif(unavailable() is not None, reason=f"simulated hosts: {unavailable()}"),
]

TRAFFIC_S = 6.0  # of traffic before each fault, and at least as long after it
SERVE_AGAIN_WITHIN_S = 30.0  # a fault that leaves nothing served for this long fails the run
RESUMED_WITHIN_S = TRAFFIC_S  # a connection through a healed link resumes within this (TCP's backed-off retransmission)

# when (from, to: time.monotonic()) a gateway may have been silent to cluster_state; None: at no time
Silence = tuple[float, float] | None


@pytest.fixture
def cluster(tiny_artifacts: Path, database_url: str, tmp_path: Path) -> Iterator[HostedCluster]:
    manifest = tmp_path / "hosted.yaml"
    manifest.write_text(tiny_manifest("hosted", legal_tier="resident", replicas=3))
    with hosted_cluster(tmp_path / "cluster", tiny_artifacts, manifest, database_url) as started:
        yield started


@dataclass(frozen=True, slots=True)
class FaultResult:
    fault: str
    requests: int
    admitted: int
    served: int
    failed_after: int  # requests sent after the fault that were not served
    serve_again_s: float  # from the fault to the first request sent after it that was served
    last_failure_s: float  # from the fault to the end of the last request sent after it that was not served (0: none)
    owner_lost: int  # served requests the log ends as owner_lost: their gateway was silent to cluster_state
    events: int
    what: str  # what exactly was hit


async def under_traffic(
    cluster: HostedCluster, inject: Callable[[], str]
) -> tuple[list[Outcome], tuple[float, float], str]:
    """Traffic through both gateways, ``inject`` the fault half-way; the outcomes, when it struck and when
    ``inject`` returned (``time.monotonic()``), and what it hit."""
    traffics = [
        Traffic(url, cluster.headers, concurrency=3, max_tokens=4, timeout=60.0, refused_backoff_s=0.2)
        for url in cluster.gateways
    ]
    for traffic in traffics:
        traffic.start()
    await asyncio.sleep(TRAFFIC_S)
    struck = time.monotonic()
    what = await asyncio.to_thread(inject)
    done = time.monotonic()

    def served_after() -> bool:
        return any(served(o) and o.sent_at > struck for t in traffics for o in t.outcomes)

    for _ in range(int(SERVE_AGAIN_WITHIN_S / 0.1)):
        if served_after():
            break
        await asyncio.sleep(0.1)
    await asyncio.sleep(TRAFFIC_S)
    outcomes = [o for traffic in traffics for o in await traffic.stop()]
    return outcomes, (struck, done), what


def result(fault: str, what: str, outcomes: list[Outcome], struck: float, report: LogReport) -> FaultResult:
    after = sorted((o for o in outcomes if o.sent_at > struck), key=lambda o: o.sent_at)
    first = next((o for o in after if served(o)), None)
    assert first is not None, f"{fault}: nothing sent after the fault was served within {SERVE_AGAIN_WITHIN_S}s"
    return FaultResult(
        fault=fault,
        requests=len(outcomes),
        admitted=sum(1 for o in outcomes if o.request_id is not None),
        served=sum(1 for o in outcomes if served(o)),
        failed_after=sum(1 for o in after if not served(o)),
        serve_again_s=round(first.sent_at + first.took_s - struck, 2),
        last_failure_s=round(max((o.sent_at + o.took_s - struck for o in after if not served(o)), default=0.0), 2),
        owner_lost=report.owner_lost,
        events=report.events_checked,
        what=what,
    )


def kill(pid: int | None, what: str) -> None:
    assert pid is not None, f"no {what} process found"
    os.kill(pid, signal.SIGKILL)


async def test_a_cluster_across_hosts_survives_each_fault_in_turn(cluster: HostedCluster) -> None:
    hosts = cluster.network.hosts
    stack1, stack2 = cluster.stacks

    def kill_nats_node() -> str:
        cluster.nats[2].kill()  # h3's node: h3's worker and every client on that node move to another
        return f"nats-server on {cluster.nats[2].host.name}"

    def kill_leader() -> str:
        leader = cluster.leader()
        kill(leader.service_pid("cluster_state"), f"cluster_state on {leader.host.name}")
        return f"cluster_state on {leader.host.name}"

    def kill_worker_per_model() -> str:
        held = {model: [h.name for h in cluster.holders(model)] for model in cluster.specialists()}
        hit = cluster.holders_to_kill()
        for host in hit:
            cluster.kill_worker(host)
        return f"workers on {', '.join(h.name for h in hit)} (placements {held})"

    def kill_gateway() -> str:
        kill(stack2.service_pid("api_gateway"), "api_gateway on h2")
        return f"api_gateway on {stack2.host.name}"

    cut_nats_node: list[bool] = []

    def partition() -> str:
        host = cluster.busiest_worker_host()
        held = [model for model in cluster.specialists() if host in cluster.holders(model)]
        cut_nats_node.append(any(node.host == host for node in cluster.nats))
        host.cut()
        time.sleep(TRAFFIC_S)
        host.heal()
        node = " and its NATS node" if cut_nats_node[-1] else ""
        return f"{host.name}{node} (its worker held {held}) cut for {TRAFFIC_S:g} s"

    def gateway_killed(struck: float, done: float) -> Silence:
        return struck, struck + 0.1

    def gateways_on_cut_node(struck: float, done: float) -> Silence:
        # a gateway whose NATS connection is on the cut host's node is silent to cluster_state while the cut
        # lasts, and until TCP's retransmissions, backed off meanwhile, resume after the heal
        return (struck, done + RESUMED_WITHIN_S) if cut_nats_node[-1] else None

    def none(struck: float, done: float) -> Silence:
        return None

    faults: list[tuple[str, Callable[[], str], Callable[[], None], Callable[[float, float], Silence]]] = [
        ("a gateway killed", kill_gateway, lambda: None, gateway_killed),
        ("a worker per model killed", kill_worker_per_model, cluster.restart_workers, none),
        ("a worker host partitioned, then healed", partition, lambda: None, gateways_on_cut_node),
        ("the cluster_state leader killed", kill_leader, lambda: None, none),
        ("a NATS node killed", kill_nats_node, lambda: cluster.nats[2].start(), none),
    ]
    earlier: set[str] = set()
    results: list[FaultResult] = []
    for name, inject, repair, silence in faults:
        outcomes, (struck, done), what = await under_traffic(cluster, inject)
        report = await asyncio.to_thread(
            check_log,
            outcomes,
            cluster.database_url,
            cluster.gateways[0],
            cluster.admin_headers,
            cluster.operator_env,
            earlier,
            unseen=inject is kill_gateway,
            owner_silent=silence(struck, done),
        )
        results.append(result(name, what, outcomes, struck, report))
        earlier |= set(await request_events(cluster.database_url))  # a dead gateway's requests too
        await asyncio.to_thread(repair)
        await asyncio.to_thread(cluster.wait_whole, 120.0)

    print(
        "\n| fault | what was hit | requests | admitted | served | served, ended owner_lost | not served, sent after "
        "| serve again (s) | last failure (s) |"
    )
    print("|---|---|---|---|---|---|---|---|---|")
    for r in results:
        print(
            f"| {r.fault} | {r.what} | {r.requests} | {r.admitted} | {r.served} | {r.owner_lost} | {r.failed_after} | "
            f"{r.serve_again_s} | {r.last_failure_s} |"
        )
    print(f"request events in the log at the end: {results[-1].events}")
    assert {worker_id(h) for h in hosts} <= set(cluster.state()["workers"])
    assert stack1.process.poll() is None
    assert stack2.process.poll() is None
