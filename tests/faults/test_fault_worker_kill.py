"""A specialist worker killed with SIGKILL while four streams run on it (real processes, `nrt up`).

Each stream ends with a clear ``worker_lost`` error within 2 s of the kill (no other worker
holds the model, so none can finish it); a new request while no worker serves the model is a
503 with Retry-After within 100 ms; once `nrt up` has restarted the worker the stack serves
again; every admitted request has exactly one terminal event, the hash chain is intact and the
replayed log equals the live state.
"""

from __future__ import annotations

import os
import re
import signal
import threading
import time
from collections import Counter
from pathlib import Path

import httpx
from fault_helpers import Streamed, events_of, nrt, replay_equals_live, stream
from stack_processes import alive, descendants, tiny_manifest

LONG = 450  # tokens (the tiny model's window is 512): a stream still runs when the worker is killed
STREAMS = 4


def worker_pid(pid: int) -> int:
    """The specialist worker's process below `nrt up`."""
    for child in descendants(pid):
        try:
            argv = Path(f"/proc/{child}/cmdline").read_bytes().split(b"\0")
        except OSError:
            continue
        if b"specialist_worker" in argv and alive(child):
            return child
    raise AssertionError("no specialist_worker process")  # pragma: no cover


_client = httpx.Client(timeout=60)  # one connection pool: the time measured is the gateway's, not a new client's


def ask(url: str) -> tuple[httpx.Response, float]:
    started = time.monotonic()
    body = {"model": "billing", "messages": [{"role": "user", "content": "hi"}], "max_tokens": 4}
    response = _client.post(f"{url}/v1/chat/completions", json=body)
    return response, time.monotonic() - started


def test_a_killed_worker_fails_its_streams_fast_and_the_stack_recovers(start_stack, tmp_path: Path) -> None:  # type: ignore[no-untyped-def]
    manifest = tmp_path / "tiny.yaml"
    manifest.write_text(tiny_manifest("faults"))
    stack = start_stack(manifest)
    admitted: set[str] = set()
    deadline = time.monotonic() + 120
    while (first := ask(stack.url)[0]).status_code != 200:  # the worker has loaded billing
        assert time.monotonic() < deadline, first.text
        time.sleep(0.5)
    admitted.add(first.headers["x-nrt-request-id"])

    streams = [Streamed() for _ in range(STREAMS)]
    threads = [threading.Thread(target=stream, args=(stack.url, "billing", LONG, s)) for s in streams]
    for thread in threads:
        thread.start()
    for s in streams:
        assert s.started.wait(60), "a stream did not start"
    killed_at = time.monotonic()
    os.kill(worker_pid(stack.process.pid), signal.SIGKILL)
    for thread in threads:
        thread.join(30)

    ended_after = [s.ended_at - killed_at for s in streams if s.ended_at is not None]
    print(f"\nstreams ended {', '.join(f'{t:.2f}' for t in ended_after)} s after the kill")
    assert len(ended_after) == STREAMS
    for s in streams:
        admitted.add(s.request_id)
        assert s.finish is None, "a stream finished although its worker was killed"
        assert s.error is not None
        assert s.error["code"] == "worker_lost", s.error
        assert "was lost" in s.error["message"]
    assert max(ended_after) <= 2.0

    # no worker serves billing now (nrt up restarts the worker after a backoff, then it loads billing)
    refused, took = ask(stack.url)
    print(f"a new request while no worker serves billing: {refused.status_code} in {took * 1000:.0f} ms")
    assert refused.status_code == 503, refused.text
    assert refused.json()["error"]["code"] == "model_unavailable"
    assert int(refused.headers["retry-after"]) >= 1
    assert took <= 0.1
    admitted.add(refused.headers["x-nrt-request-id"])  # recorded: admitted, then failed

    while (again := ask(stack.url))[0].status_code != 200:
        assert time.monotonic() - killed_at < 90, again[0].text
        time.sleep(0.2)
    print(f"serving again {time.monotonic() - killed_at:.1f} s after the kill")
    admitted.add(again[0].headers["x-nrt-request-id"])

    # the log: each admitted request once, ended once; the hash chain intact; the replay equals the live state
    deadline = time.monotonic() + 60
    while not replay_equals_live(stack):
        assert time.monotonic() < deadline, "no quiet moment to compare the replay with the live state"
        time.sleep(0.5)
    recorded = Counter(events_of(stack, "RequestAdmitted"))
    ended = Counter(events_of(stack, "RequestCompleted") + events_of(stack, "RequestFailed"))
    assert admitted <= set(recorded), admitted - set(recorded)
    assert set(recorded.values()) == {1}, recorded
    assert set(ended.values()) == {1}, ended
    assert set(ended) == set(recorded)
    failed = [line for line in nrt(stack, "events", "query", "--type", "RequestFailed").splitlines() if line.strip()]
    assert len(failed) >= STREAMS
    assert re.fullmatch(r"hash chain intact: \d+ events verified\n", nrt(stack, "audit", "verify"))
