"""A specialist worker killed with SIGKILL while four streams run on it (real processes, `nrt up`).

Each stream ends with a clear ``worker_lost`` error within 2 s of the kill (no other worker
holds the model, so none can finish it); a new request while no worker serves the model is a
503 with Retry-After within 100 ms; once `nrt up` has restarted the worker the stack serves
again; every admitted request is recorded exactly once with the outcome its client saw, the hash
chain is intact and the replayed log equals the live state.
"""

from __future__ import annotations

import os
import signal
import threading
import time

import httpx

from fault_kit import FaultStack, Outcome, Streamed, report, stream
from nrt.testing.processes import python_services

LONG = 450  # tokens (the tiny model's window is 512): a stream still runs when the worker is killed
STREAMS = 4


def ask(client: httpx.Client) -> Outcome:
    """One short direct request for billing, timed."""
    sent = time.monotonic()
    body = {"model": "billing", "messages": [{"role": "user", "content": "hi"}], "max_tokens": 4}
    response = client.post("/v1/chat/completions", json=body)
    code = None if response.status_code == 200 else str(response.json()["error"]["code"])
    return Outcome(
        sent,
        time.monotonic() - sent,
        response.status_code,
        response.headers.get("x-nrt-request-id"),
        code,
        response.headers.get("retry-after"),
        routed=False,
    )


def test_a_killed_worker_fails_its_streams_fast_and_the_stack_recovers(fault_stack: FaultStack) -> None:
    outcomes: list[Outcome] = []
    # one connection pool: the time measured is the gateway's, not a new connection's
    with httpx.Client(base_url=fault_stack.url, headers=fault_stack.headers, timeout=60) as client:
        deadline = time.monotonic() + 120
        while (first := ask(client)).status != 200:  # the worker has loaded billing
            assert time.monotonic() < deadline, first
            time.sleep(0.5)
        outcomes.append(first)

        streams = [Streamed() for _ in range(STREAMS)]
        threads = [
            threading.Thread(target=stream, args=(fault_stack.url, "billing", LONG, s, None, fault_stack.headers))
            for s in streams
        ]
        started = time.monotonic()
        for thread in threads:
            thread.start()
        for s in streams:
            assert s.started.wait(60), "a stream did not start"
        worker = python_services(fault_stack.process.pid, ("specialist_worker",))["specialist_worker"]
        killed_at = time.monotonic()
        os.kill(worker, signal.SIGKILL)
        for thread in threads:
            thread.join(30)

        assert all(s.ended_at is not None for s in streams)
        for s in streams:
            outcomes.append(s.outcome(started, routed=False))
        # a fast machine may finish a stream before the kill lands: those are served, the rest must fail
        cut = [s for s in streams if s.finish is None]
        assert len(cut) >= 2, "fewer than two streams were still running at the kill"
        ended_after = [s.ended_at - killed_at for s in cut if s.ended_at is not None]
        for s in cut:
            assert s.error is not None
            assert s.error["code"] == "worker_lost", s.error
            assert "was lost" in s.error["message"]
        assert max(ended_after) <= 2.0

        # no worker serves billing now (nrt up restarts the worker after a backoff, then it loads billing)
        refused = ask(client)
        outcomes.append(refused)
        assert refused.status == 503, refused
        assert refused.code == "model_unavailable"
        assert refused.retry_after is not None
        assert int(refused.retry_after) >= 1
        assert refused.took_s <= 0.1

        while (again := ask(client)).status != 200:
            outcomes.append(again)
            assert time.monotonic() - killed_at < 90, again
            time.sleep(0.2)
        outcomes.append(again)
        serving_again = time.monotonic() - killed_at

    log = fault_stack.check_log(outcomes)
    report(
        "worker-sigkill",
        {
            "streams_ended_after_s": [round(t, 2) for t in sorted(ended_after)],
            "refused_in_ms": round(refused.took_s * 1000, 1),
            "serving_again_s": round(serving_again, 1),
            "requests": log.requests,
            "request_events_checked": log.events_checked,
            "chain_events": log.chain_events,
        },
    )
