"""Two workers on one model: a session's turns go to the worker holding its KV, and a request whose
worker dies before its first token is answered by the other (real NATS, PostgreSQL, ONNX Runtime).

The stack is the in-process harness with cluster_state (it places ``billing`` on two workers: the
manifest says ``replicas: 2``) plus a second specialist worker as a process of its own (``w-proc``),
so that it can be stopped and killed for real. Each session's turn 2 is answered by the worker that
answered turn 1 and prefills only the new tokens. Then ``w-proc`` is stopped (SIGSTOP) with a turn of
its session on its way to it, and killed (SIGKILL) before answering: cluster_state declares it lost,
the gateway sends the request once more, avoiding it, and ``w-gateway`` answers with a cold prefill;
the request is in the log once (admitted, completed), and the session's next turn stays on its new worker.
Another session of ``w-proc``'s, idle when it died, has its next turn answered by ``w-gateway``, cold.
"""

from __future__ import annotations

import asyncio
import os
import signal
import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from harness import Stack, start_stack
from nrt.adapters.bus.broker import start_broker
from nrt.adapters.bus.follow import EventFollower
from nrt.adapters.store import EventStore
from nrt.core.events import SessionTouched, WorkerLost
from nrt.core.routing import rendezvous, serving_workers

IN_PROCESS = "w-gateway"  # the harness' own worker
PROCESS = "w-proc"
WORKERS = (IN_PROCESS, PROCESS)

# billing: a conversation template (turn N+1 extends turn N: its KV is reused) on two workers
TWO_COPIES = (
    '      template: "Billing desk. Q: {last_user}\\nA:"\n',
    '      template: "Billing desk.\\n\\n{turns}Agent:"\n'
    '      turn_template: {user: "Customer: {content}\\n", assistant: "Agent:{content}\\n\\n"}\n'
    "      replicas: 2\n",
)


@pytest.fixture
def worker_process(nats_url: str, nrt_home: Path, tmp_path: Path) -> Iterator[subprocess.Popen[bytes]]:
    """``python -m specialist_worker`` as ``w-proc``: started by the test, killed at the end whatever happened."""
    env = {
        **os.environ,
        "NRT_NATS_URL": nats_url,
        "NRT_HOME": str(nrt_home),
        "NRT_WORKER_ID": PROCESS,
        "NRT_HEARTBEAT_S": "0.5",  # what the harness' cluster_state expects
        "NRT_WORKER_ORT_THREADS": "1",
        "NRT_LOG_LEVEL": "WARNING",
        "NRT_WORKER_PREFIX_CACHE": "0",  # the sessions here start alike: a moved one prefills all of it, cold
    }
    log = (tmp_path / "w-proc.log").open("wb")
    process = subprocess.Popen([sys.executable, "-m", "specialist_worker"], env=env, stdout=log, stderr=log)
    yield process
    if process.poll() is None:
        process.send_signal(signal.SIGCONT)
        process.kill()
        process.wait(30)


def session_on(worker_id: str, tag: str) -> str:
    """A session id that rendezvous hashing sends to ``worker_id`` while both workers serve billing."""
    return next(s for i in range(1000) if rendezvous(s := f"{tag}-{i}", WORKERS) == worker_id)


async def turn(stack: Stack, session_id: str, history: list[dict[str, str]], text: str) -> tuple[str, dict[str, Any]]:
    """One turn of a conversation on billing: its request id and usage; the answer joins ``history``."""
    history.append({"role": "user", "content": text})
    async with stack.http() as http:
        response = await http.post(
            "/v1/chat/completions",
            json={"model": "billing", "messages": history},
            headers={"X-NRT-Session": session_id},
        )
    assert response.status_code == 200, response.text
    body = response.json()
    history.append({"role": "assistant", "content": body["choices"][0]["message"]["content"] or ""})
    return response.headers["x-nrt-request-id"], body["usage"]


async def touches(stack: Stack, session_id: str, n: int) -> list[SessionTouched]:
    """The session's first ``n`` SessionTouched events, from the stream (waits for them)."""
    deadline = time.monotonic() + 20
    while True:
        found = [e for e in await stack.events() if isinstance(e, SessionTouched) and e.session_id == session_id]
        if len(found) >= n or time.monotonic() > deadline:
            assert len(found) >= n, f"{session_id}: {len(found)} SessionTouched, expected {n}"
            return found[:n]
        await asyncio.sleep(0.1)


async def logged(store: EventStore, request_id: str, expected: int) -> list[str]:
    deadline = time.monotonic() + 20
    while True:
        types = [r.event.type for r in await store.query(stream_id=f"request:{request_id}")]
        if len(types) >= expected or time.monotonic() > deadline:
            return types
        await asyncio.sleep(0.1)


async def on_both_workers(follower: EventFollower, worker_process: subprocess.Popen[bytes]) -> None:
    """Wait until the log says both workers serve billing (cluster_state places the second copy once w-proc joins)."""
    try:
        await follower.wait_for(lambda s: serving_workers(s, "billing") == WORKERS, within=120)
    except TimeoutError:
        state = follower.state
        billing = state.models.get("billing")
        raise AssertionError(
            f"billing is not on both workers: workers {sorted(state.workers)}, "
            f"placements {billing.tiers if billing else None}, w-proc exit {worker_process.poll()}"
        ) from None


async def test_turns_follow_the_kv_and_a_request_whose_worker_dies_first_is_answered_by_the_other(
    nats_url: str,
    nrt_home: Path,
    database_url: str,
    event_store: EventStore,
    worker_process: subprocess.Popen[bytes],
) -> None:
    async with start_stack(
        nats_url, "tiny-support.yaml", edit=TWO_COPIES, database_url=database_url, prefix_cache_bytes=0
    ) as stack:
        broker = await start_broker(nats_url, "api_gateway")  # the test's own view of the log
        follower = EventFollower(broker)
        await follower.start()
        try:
            await on_both_workers(follower, worker_process)

            # turn 2 of each session goes to the worker that holds its KV, and prefills only the new tokens
            sessions = {worker_id: session_on(worker_id, "sticky") for worker_id in WORKERS}
            histories: dict[str, list[dict[str, str]]] = {s: [] for s in sessions.values()}
            for worker_id, session_id in sessions.items():
                _, first = await turn(stack, session_id, histories[session_id], "My order number is 4417.")
                _, second = await turn(stack, session_id, histories[session_id], "What is my order number?")
                one, two = await touches(stack, session_id, 2)
                assert (one.worker_id, two.worker_id) == (worker_id, worker_id)
                assert one.reused_tokens == 0
                cached = second["prompt_tokens_details"]["cached_tokens"]
                assert two.reused_tokens == cached == first["prompt_tokens"] + first["completion_tokens"] - 1
                assert second["prompt_tokens"] - cached < first["prompt_tokens"]  # only the new turn was prefilled

            # a second conversation on w-proc, idle when w-proc dies
            idle = session_on(PROCESS, "idle")
            histories[idle] = []
            await turn(stack, idle, histories[idle], "My card ends in 0042.")
            assert (await touches(stack, idle, 1))[0].worker_id == PROCESS

            # w-proc stops with a turn of its session on the way to it, and dies before answering
            session_id = sessions[PROCESS]
            await follower.wait_for(lambda s: session_id in s.sessions and s.sessions[session_id].turns == 2, within=10)
            worker_process.send_signal(signal.SIGSTOP)
            sent = time.monotonic()
            third = asyncio.create_task(turn(stack, session_id, histories[session_id], "And my invoice?"))
            await asyncio.sleep(0.5)
            assert not third.done()  # nothing answers it: its worker is stopped
            worker_process.kill()
            killed = time.monotonic()
            request_id, usage = await asyncio.wait_for(third, 30)
            answered_s = time.monotonic() - killed

            lost = [e for e in await stack.events() if isinstance(e, WorkerLost) and e.worker_id == PROCESS]
            assert len(lost) == 1
            moved = (await touches(stack, session_id, 3))[2]
            assert moved.worker_id == IN_PROCESS  # the other copy answered
            assert moved.reused_tokens == 0 == usage["prompt_tokens_details"]["cached_tokens"]  # a cold prefill
            assert usage["completion_tokens"] > 0

            # the idle conversation's next turn, sent once w-proc is known lost, goes to w-gateway: a cold prefill
            _, idle_usage = await turn(stack, idle, histories[idle], "Which card was it?")
            idle_moved = (await touches(stack, idle, 2))[1]
            assert idle_moved.worker_id == IN_PROCESS
            assert idle_moved.reused_tokens == 0 == idle_usage["prompt_tokens_details"]["cached_tokens"]

            # the session's next turn stays on its new worker, which now holds its KV
            _, fourth = await turn(stack, session_id, histories[session_id], "Thanks.")
            assert (await touches(stack, session_id, 4))[3].worker_id == IN_PROCESS
            assert fourth["prompt_tokens_details"]["cached_tokens"] > 0
            # the retried request is accounted once: admitted once, completed once, never failed
            assert await logged(event_store, request_id, 2) == ["RequestAdmitted", "RequestCompleted"]
        finally:
            await broker.stop()
        print(
            f"\nretried turn answered {answered_s:.2f}s after the kill ({time.monotonic() - sent:.2f}s after sending)"
        )
