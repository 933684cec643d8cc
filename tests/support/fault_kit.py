"""What every fault test needs: traffic with an outcome per request, and the log's account of it.

A fault test starts a real stack (`nrt up`), runs :class:`Traffic` against it, injects its
fault, and then checks the log against what the clients saw (:func:`check_log`): each request
that got a request id has exactly one ``RequestAdmitted`` and exactly one outcome event, the
one that matches its HTTP answer; no event is stored twice; the hash chain is intact; the
replayed log equals the live state.
"""

from __future__ import annotations

import asyncio
import json
import os
import re
import subprocess
import sys
import threading
import time
from collections import Counter
from collections.abc import Callable, Collection, Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import httpx

from nrt.adapters.store import EventStore
from nrt.core.events import RequestFailed, RequestRouted
from nrt.core.policies.owners import OWNER_LOST
from nrt.entrypoints.stack import keys_file
from nrt.entrypoints.stack.endpoints import Endpoints, stack_dir
from nrt.testing import stacks

# where a stack's servers and gateway are; a stack started by `nrt up` is found without them
STACK_ENV = ("NRT_NATS_URL", "NRT_DATABASE_URL", "NRT_GATEWAY_URL")
REQUEST_EVENTS = ("RequestAdmitted", "RequestRouted", "RequestCompleted", "RequestFailed")
RETRY_ROUTED = "RequestRouted (retry)"  # router_svc's decision for the gateway's retry after a lost worker
MESSAGES = ("I was charged twice this month", "The app crashes when I upload a file", "Is this contract binding?")


class FaultStack:
    def __init__(self, process: subprocess.Popen[bytes], endpoints: Endpoints, log: Path) -> None:
        self.process, self.endpoints, self.log = process, endpoints, log

    @property
    def url(self) -> str:
        return self.endpoints.gateway_url

    @property
    def data_dir(self) -> Path:
        return stack_dir()

    def _key(self, admin: bool) -> str:
        keys = keys_file.read(self.data_dir)
        assert keys is not None, f"nrt up wrote no keys file in {self.data_dir}"
        return keys.admin_key if admin else keys.api_key

    @property
    def headers(self) -> dict[str, str]:
        """What a client of this stack sends with each request: its infer key."""
        return {"Authorization": f"Bearer {self._key(admin=False)}"}

    def check_log(self, outcomes: list[Outcome]) -> LogReport:
        """:func:`check_log` of ``outcomes`` against this stack's log and live state."""
        return check_log(outcomes, self.endpoints.database_url, self.url, self.admin_headers, self.env)

    @property
    def admin_headers(self) -> dict[str, str]:
        """An operator's: the admin key (which sees the whole state, API keys included)."""
        return {"Authorization": f"Bearer {self._key(admin=True)}"}

    @property
    def env(self) -> dict[str, str]:
        """What an operator's `nrt` command runs with (NRT_HOME is already in this process' environment)."""
        return {}


@dataclass(frozen=True, slots=True)
class Outcome:
    sent_at: float  # monotonic
    took_s: float
    status: int  # 0: the connection failed
    request_id: str | None  # X-NRT-Request-Id: the gateway admitted it and records it
    code: str | None = None  # the OpenAI error code, for an error
    retry_after: str | None = None
    routed: bool = True  # sent to the entry model: router_svc records its decision


@dataclass(slots=True)
class Traffic:
    """``concurrency`` clients sending routed chat requests back to back until :meth:`stop`."""

    url: str
    headers: Mapping[str, str] = field(default_factory=dict)
    concurrency: int = 8
    max_tokens: int = 6
    stream: bool | None = None  # None: every other request streams
    timeout: float = 90.0
    refused_backoff_s: float = 0.0  # how long a client waits after its gateway did not answer (a load balancer's retry)
    outcomes: list[Outcome] = field(default_factory=list)
    _stop: asyncio.Event = field(default_factory=asyncio.Event)
    _tasks: list[asyncio.Task[None]] = field(default_factory=list)

    def start(self) -> None:
        self._tasks = [asyncio.create_task(self._client(i)) for i in range(self.concurrency)]

    async def stop(self) -> list[Outcome]:
        self._stop.set()
        await asyncio.gather(*self._tasks)
        return self.outcomes

    async def _client(self, index: int) -> None:
        async with httpx.AsyncClient(base_url=self.url, headers=dict(self.headers), timeout=self.timeout) as client:
            n = index
            while not self._stop.is_set():
                n += self.concurrency
                outcome = await self.one(
                    client, MESSAGES[n % len(MESSAGES)], stream=n % 2 == 0 if self.stream is None else self.stream
                )
                self.outcomes.append(outcome)
                if outcome.status == 0 and self.refused_backoff_s:
                    await asyncio.sleep(self.refused_backoff_s)

    async def one(self, client: httpx.AsyncClient, message: str, stream: bool) -> Outcome:
        body = {
            "model": "router",
            "messages": [{"role": "user", "content": message}],
            "max_tokens": self.max_tokens,
            "stream": stream,
        }
        sent = time.monotonic()
        try:
            response = await client.post("/v1/chat/completions", json=body)
        except httpx.TransportError:
            return Outcome(sent, time.monotonic() - sent, 0, None)
        code = None
        if response.status_code == 200 and stream:
            code = stream_error(response.text)  # an error frame after the first token
        elif response.status_code != 200:
            code = error_code(response)
        return Outcome(
            sent,
            time.monotonic() - sent,
            response.status_code,
            response.headers.get("x-nrt-request-id"),
            code,
            response.headers.get("retry-after"),
        )


@dataclass
class Streamed:
    """One streamed chat request, read on its own thread: what came, how it ended, and when."""

    status: int = 0  # the HTTP status the answer began with
    chunks: int = 0
    request_id: str = ""
    finish: str | None = None
    error: dict[str, Any] | None = None
    ended_at: float | None = None
    started: threading.Event = field(default_factory=threading.Event)

    def outcome(self, sent_at: float, routed: bool) -> Outcome:
        code = None if self.error is None else str(self.error["code"])
        return Outcome(sent_at, 0.0, self.status, self.request_id or None, code, routed=routed)


def stream(
    url: str,
    model: str,
    max_tokens: int,
    out: Streamed,
    stop_after: int | None = None,
    headers: Mapping[str, str] | None = None,
) -> None:
    """Stream a chat completion into ``out``; close the connection after ``stop_after`` chunks."""
    body = {"model": model, "messages": [{"role": "user", "content": "tell me a long story"}], "stream": True}
    body["max_tokens"] = max_tokens
    with httpx.stream(
        "POST", f"{url}/v1/chat/completions", json=body, headers=dict(headers or {}), timeout=120
    ) as response:
        out.request_id = response.headers.get("x-nrt-request-id", "")
        out.status = response.status_code
        if response.status_code != 200:
            response.read()
            out.error = response.json()["error"]
            out.ended_at = time.monotonic()
            out.started.set()
            return
        for line in response.iter_lines():
            if not line.startswith("data: ") or line == "data: [DONE]":
                continue
            data = json.loads(line.removeprefix("data: "))
            if "error" in data:
                out.error = data["error"]
                continue
            for choice in data.get("choices", []):
                if choice.get("delta", {}).get("content"):
                    out.chunks += 1
                out.finish = choice.get("finish_reason") or out.finish
            if out.chunks >= 3:
                out.started.set()
            if stop_after is not None and out.chunks >= stop_after:
                break  # the client goes away mid-stream
    out.ended_at = time.monotonic()
    out.started.set()


def error_code(response: httpx.Response) -> str:
    try:
        return str(response.json()["error"]["code"])
    except (ValueError, KeyError, TypeError):
        return f"http_{response.status_code}"


def stream_error(text: str) -> str | None:
    """The code of an error frame in an SSE body, if the stream ended with one."""
    for line in text.splitlines():
        if line.startswith("data: {") and '"error"' in line:
            return str(json.loads(line[6:])["error"]["code"])
    return None


def routings(counts: Counter[str]) -> int:
    """How many times router_svc routed a request: its first attempt and the gateway's retry each at most once."""
    return counts["RequestRouted"] + counts[RETRY_ROUTED]


def served(outcome: Outcome) -> bool:
    return outcome.status == 200 and outcome.code is None


async def request_events(database_url: str) -> dict[str, Counter[str]]:
    """For each request id in the log: how many events of each request type it has."""
    store = EventStore.connect(database_url, pool_size=1)
    found: dict[str, Counter[str]] = {}
    try:
        async for record in store.read_positions():
            kind = type(record.event).__name__
            if isinstance(record.event, RequestRouted) and record.event.attempt > 1:
                kind = RETRY_ROUTED
            if kind in (*REQUEST_EVENTS, RETRY_ROUTED):
                found.setdefault(record.stream_id.removeprefix("request:"), Counter())[kind] += 1
    finally:
        await store.close()
    return found


ANSWERED_BEFORE_SILENCE_S = 1.0  # a request answered this long before its gateway fell silent may end as owner_lost


def in_flight_during(outcome: Outcome, silent: tuple[float, float] | None) -> bool:
    """Whether ``outcome`` was in flight while its gateway may have been silent (``silent``: from, to, in
    ``time.monotonic()``), or was answered in the moment before: its end may then be cluster_state's
    ``owner_lost`` rather than the gateway's own (the gateway's end was in its memory, outbox or socket)."""
    if silent is None:
        return False
    answered = outcome.sent_at + outcome.took_s
    return answered >= silent[0] - ANSWERED_BEFORE_SILENCE_S and outcome.sent_at <= silent[1]


async def request_end_code(database_url: str, request_id: str) -> str | None:
    """The code of the ``RequestFailed`` that ended ``request_id`` in the log (None: none did)."""
    store = EventStore.connect(database_url, pool_size=1)
    try:
        records = await store.read_stream(f"request:{request_id}")
    finally:
        await store.close()
    return next((r.event.code for r in records if isinstance(r.event, RequestFailed)), None)


async def request_story(database_url: str, request_id: str) -> list[str]:
    """The events of one request in the log, one line each: what a failed check shows."""
    store = EventStore.connect(database_url, pool_size=1)
    try:
        records = await store.read_stream(f"request:{request_id}")
    finally:
        await store.close()
    return [f"{r.position} {r.event!r}" for r in records]


def nrt(*args: str, cwd: Path | None = None, env: Mapping[str, str] | None = None) -> str:
    """``nrt ARGS`` as an operator runs it against a local stack (found through NRT_HOME, no URL)."""
    environment = {k: v for k, v in os.environ.items() if k not in STACK_ENV} | dict(env or {})
    done = subprocess.run(
        [sys.executable, "-m", "nrt.entrypoints.cli.main", *args],
        env=environment,
        cwd=cwd,
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert done.returncode == 0, f"nrt {' '.join(args)} exited with {done.returncode}:\n{done.stdout}\n{done.stderr}"
    return done.stdout


def eventually(check: Callable[[], Any], within: float, what: str) -> Any:
    """``check()``'s first truthy result; transport errors count as "not yet", failed assertions fail."""
    return stacks.eventually(check, within, what, retry_on=(httpx.HTTPError, OSError))


@dataclass(frozen=True, slots=True)
class NotYet:
    """A check's "not yet" (falsy) that says why, for the failure message when time runs out."""

    reason: str

    def __bool__(self) -> bool:
        return False


def live_state(url: str, headers: Mapping[str, str]) -> dict[str, Any]:
    response = httpx.get(f"{url}/v1/cluster", headers=dict(headers), timeout=10)
    assert response.status_code == 200, response.text
    assert response.headers["x-nrt-state-source"] == "cluster_state"  # the fold of the PostgreSQL log
    state: dict[str, Any] = response.json()
    return state


@dataclass(frozen=True, slots=True)
class LogReport:
    requests: int  # requests the clients sent
    admitted: int  # requests the gateway admitted (and so must have recorded)
    served: int
    events_checked: int
    chain_events: int
    owner_lost: int = 0  # served requests the log ends as cluster_state's owner_lost (their gateway fell silent)


def check_log(
    outcomes: list[Outcome],
    database_url: str,
    url: str,
    headers: Mapping[str, str],
    env: Mapping[str, str],
    earlier: Collection[str] = frozenset(),
    unseen: bool = False,
    owner_silent: tuple[float, float] | None = None,
) -> LogReport:
    """Every admitted request recorded exactly once with the outcome its client saw; chain intact; replay == live.

    ``earlier``: the ids of requests already in the log before this traffic (a stack that served before),
    which are not this traffic's strays. ``unseen``: a gateway died under this traffic, so a request it
    admitted may have reached the log while its client saw only the connection drop (no id): such
    requests, at most one per client that got no answer, must each be recorded once too. ``owner_silent``: when
    (from, to, ``time.monotonic()``) a gateway may have been silent to cluster_state (killed; or its NATS server
    cut off): a served request in flight then, or answered in the ``ANSWERED_BEFORE_SILENCE_S`` before, may be
    recorded as cluster_state's ``owner_lost`` (the log keeps the first end; see the README), and no other
    failure. Waits (bounded) for the recorder to catch up with the traffic before it compares."""
    admitted = {o.request_id: o for o in outcomes if o.request_id is not None}
    assert len(admitted) == sum(1 for o in outcomes if o.request_id is not None), "a request id was reused"

    def ended(counts: Counter[str]) -> bool:
        return counts["RequestAdmitted"] >= 1 and counts["RequestCompleted"] + counts["RequestFailed"] >= 1

    def recorded() -> dict[str, Counter[str]] | None:
        found = asyncio.run(request_events(database_url))
        missing = [
            r
            for r, o in admitted.items()
            if not ended(found.get(r, Counter())) or (served(o) and o.routed and routings(found.get(r, Counter())) < 1)
        ]
        unended = [r for r in set(found) - set(admitted) - set(earlier) if unseen and not ended(found[r])]
        return None if missing or unended else found

    found = eventually(recorded, 60, "every admitted request's events in the log")
    owner_lost = 0
    for request_id, outcome in admitted.items():
        counts = found[request_id]
        assert counts["RequestAdmitted"] == 1, (request_id, counts)
        outcome_events = counts["RequestCompleted"] + counts["RequestFailed"]
        assert outcome_events == 1, (request_id, counts, outcome, asyncio.run(request_story(database_url, request_id)))
        assert counts["RequestRouted"] <= 1, (request_id, counts)  # router_svc's decision, once at most
        assert counts[RETRY_ROUTED] <= 1, (request_id, counts)  # and once more for the gateway's one retry
        if served(outcome) and counts["RequestFailed"] and in_flight_during(outcome, owner_silent):
            code = asyncio.run(request_end_code(database_url, request_id))
            assert code == OWNER_LOST, (request_id, counts, outcome, code)
            owner_lost += 1
        elif served(outcome):
            story = counts if counts["RequestCompleted"] else asyncio.run(request_story(database_url, request_id))
            assert counts["RequestCompleted"] == 1, (request_id, story, outcome, owner_silent)
            # routed: by its first attempt's router_svc, its retry's, or both; a direct call: by none
            assert (routings(counts) >= 1) if outcome.routed else (routings(counts) == 0), (request_id, counts, outcome)
    strays = set(found) - set(admitted) - set(earlier)
    if unseen:
        unanswered = sum(1 for o in outcomes if o.request_id is None and o.status == 0)
        assert len(strays) <= unanswered, (
            f"{len(strays)} requests in the log whose clients saw no id, {unanswered} unanswered"
        )
        for request_id in strays:
            counts = found[request_id]
            assert counts["RequestAdmitted"] == 1, (request_id, counts)
            assert counts["RequestCompleted"] + counts["RequestFailed"] == 1, (request_id, counts)
    else:
        assert not strays, f"request events for requests no client sent: {sorted(strays)[:5]}"

    verified = nrt("audit", "verify", env=env)
    chain = re.fullmatch(r"hash chain intact: (\d+) events verified\n(?:snapshots intact: .*\n)?", verified)
    assert chain, verified

    def replay_equals_live() -> bool | NotYet:
        before = live_state(url, headers)
        if before["in_flight"]:
            return NotYet(f"requests in flight: {sorted(before['in_flight'])[:5]}")
        replayed = json.loads(nrt("replay", "--json", env=env))
        after = live_state(url, headers)
        if before != after:  # an event was recorded meanwhile: try again
            changed = sorted(key for key in after if before.get(key) != after[key])
            return NotYet(
                f"the state changed during the replay ({changed}, events {before['events_applied']} -> "
                f"{after['events_applied']})"
            )
        assert replayed["position"] == after["events_applied"]
        assert replayed["state"] == after
        return True

    eventually(replay_equals_live, 60, "a quiet moment to compare the replay with the live state")
    return LogReport(
        requests=len(outcomes),
        admitted=len(admitted),
        served=sum(1 for o in outcomes if served(o)),
        events_checked=sum(sum(c.values()) for c in found.values()),
        chain_events=int(chain.group(1)),
        owner_lost=owner_lost,
    )


def report(name: str, figures: Mapping[str, object]) -> None:
    """The figures of a fault run, on one line the closing note can quote (pytest -s shows it)."""
    print(f"\n[fault {name}] " + ", ".join(f"{k}={v}" for k, v in figures.items()), flush=True)
