"""A client that goes away mid-stream (real processes, `nrt up`): the worker stops generating its
request within one decode step (its log says how many tokens ran after the cancel), and the request
is recorded as cancelled (``RequestFailed``, code ``client_disconnected``, status 499)."""

from __future__ import annotations

import asyncio
import re
import time

from fault_kit import FaultStack, Outcome, Streamed, report, request_events, stream
from nrt.adapters.store import EventStore

LONG = 450  # tokens: far more than the client reads


async def recorded_failure(database_url: str, request_id: str) -> tuple[str, int] | None:
    store = EventStore.connect(database_url, pool_size=1)
    try:
        for record in await store.read_stream(f"request:{request_id}"):
            code, status = getattr(record.event, "code", None), getattr(record.event, "status", None)
            if type(record.event).__name__ == "RequestFailed" and code is not None and status is not None:
                return str(code), int(status)
    finally:
        await store.close()
    return None


def test_a_client_that_disconnects_cancels_its_generation_on_the_worker(fault_stack: FaultStack) -> None:
    outcomes: list[Outcome] = []
    deadline = time.monotonic() + 120
    while True:  # the worker has loaded billing
        out = Streamed()
        sent = time.monotonic()
        stream(fault_stack.url, "billing", LONG, out, stop_after=5, headers=fault_stack.headers)
        outcomes.append(out.outcome(sent, routed=False))
        if out.error is None:
            break
        assert out.error["code"] == "model_unavailable", out.error  # else: not a matter of waiting
        assert time.monotonic() < deadline, f"billing was not served in time: {out.error}"
        time.sleep(0.5)
    assert out.chunks == 5
    assert out.finish is None
    worker_log = fault_stack.data_dir / "logs" / "specialist_worker.log"
    pattern = re.compile(rf"request {out.request_id} stopped after (\d+) tokens, (\d+) after its consumer left")
    found = None
    deadline = time.monotonic() + 10
    while found is None:
        found = pattern.search(worker_log.read_text())
        assert found or time.monotonic() < deadline, worker_log.read_text()[-3000:]
        time.sleep(0.1)
    generated, after_cancel = int(found.group(1)), int(found.group(2))
    assert after_cancel <= 1  # within one decode step
    assert generated < LONG

    deadline = time.monotonic() + 30
    while (failure := asyncio.run(recorded_failure(fault_stack.endpoints.database_url, out.request_id))) is None:
        assert time.monotonic() < deadline, asyncio.run(request_events(fault_stack.endpoints.database_url))
        time.sleep(0.3)
    assert failure == ("client_disconnected", 499)
    # the client saw a 200 and went away: not served, so it must be recorded as failed, once
    outcomes[-1] = Outcome(sent, 0.0, 200, out.request_id, "client_disconnected", routed=False)
    log = fault_stack.check_log(outcomes)
    report(
        "client-disconnect",
        {"tokens_generated": generated, "of": LONG, "after_cancel": after_cancel, "chain_events": log.chain_events},
    )
