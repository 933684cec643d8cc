"""Operating a stack started by `nrt up` as a user would: NRT_HOME set, no --data-dir.

One stack for the whole test: the client and ops commands find it with no URL flag and
no NRT_* URL in their environment; the replayed log equals the live state; a service
killed with SIGKILL is restarted and reported; Ctrl-C stops everything, in order.
"""

from __future__ import annotations

import json
import os
import re
import signal
import subprocess
import sys
from functools import partial
from pathlib import Path
from typing import Any

import httpx
import openai
from openai import OpenAI

from nrt.entrypoints.cli.up import SERVICES
from nrt.entrypoints.stack.endpoints import ENDPOINTS_FILE
from nrt.testing import stacks
from stack_processes import STACK_ENV, Stack, alive, descendants, tiny_manifest

TINY = tiny_manifest("tiny-ops")
# transport errors count as "not yet"
eventually = partial(stacks.eventually, retry_on=(httpx.HTTPError, openai.APIError, OSError))


def nrt(*args: str, cwd: Path, ok: bool = True) -> subprocess.CompletedProcess[str]:
    """``nrt ARGS`` as a user runs it: no URL flag, no key, no NRT_* URL in the environment (NRT_HOME only)."""
    env = {k: v for k, v in os.environ.items() if k not in (*STACK_ENV, "NRT_API_KEY", "NRT_ADMIN_KEY")}
    done = subprocess.run(
        [sys.executable, "-m", "nrt.entrypoints.cli.main", *args],
        env=env,
        cwd=cwd,
        capture_output=True,
        text=True,
        timeout=120,
    )
    if ok:
        assert done.returncode == 0, (
            f"nrt {' '.join(args)} exited with {done.returncode}:\n{done.stdout}\n{done.stderr}"
        )
    return done


def routed(stack: Stack, message: str, session: str | None = None) -> tuple[str, str]:
    """One routed, streamed request: (request id, target the router chose)."""
    client = OpenAI(base_url=f"{stack.url}/v1", api_key=stack.keys.api_key, max_retries=0)
    stream = client.chat.completions.create(
        model="router",
        messages=[{"role": "user", "content": message}],
        max_tokens=6,
        stream=True,
        extra_headers={"X-NRT-Session": session} if session else None,
    )
    request_id, target, finish = "", "", None
    for chunk in stream:
        request_id = chunk.id.removeprefix("chatcmpl-")
        for choice in chunk.choices:
            for call in choice.delta.tool_calls or []:
                assert call.function is not None
                target = json.loads(call.function.arguments or "{}")["target"]
            finish = choice.finish_reason or finish
    assert finish in ("stop", "length")
    assert target in ("billing", "legal")
    return request_id, target


def live_state(stack: Stack) -> dict[str, Any]:
    """The whole folded state: with the admin key, its API keys (hashes and usage) too."""
    response = httpx.get(f"{stack.url}/v1/cluster", timeout=10, headers=stack.headers(admin=True))
    assert response.status_code == 200
    assert response.headers["x-nrt-state-source"] == "cluster_state"  # the fold of the PostgreSQL log
    state: dict[str, Any] = response.json()
    return state


def services(stack: Stack) -> dict[str, int]:
    """The pid of each service below `nrt up`, by the module its command line runs."""
    found: dict[str, int] = {}
    for pid in descendants(stack.process.pid):
        try:
            argv = Path(f"/proc/{pid}/cmdline").read_bytes().split(b"\0")
        except OSError:
            continue
        for name in SERVICES:
            if name.encode() in argv and b"-m" in argv and alive(pid):
                found[name] = pid
    return found


def test_a_stack_in_nrt_home_is_found_replayed_restarted_and_stopped_with_ctrl_c(  # type: ignore[no-untyped-def]
    start_stack, nrt_home: Path, tmp_path: Path
) -> None:
    manifest = tmp_path / "tiny.yaml"
    manifest.write_text(TINY)
    stack = start_stack(manifest, in_nrt_home=True)
    assert stack.data_dir == nrt_home / "stack"
    assert (nrt_home / "stack" / ENDPOINTS_FILE).is_file()
    elsewhere = tmp_path / "elsewhere"  # the commands run from another directory
    elsewhere.mkdir()

    # -- traffic: routed requests (two of them in one conversation), then `nrt chat` with no flag
    requests = [
        routed(stack, "I was charged twice this month", session="conversation-1"),
        routed(stack, "and the invoice shows the wrong address", session="conversation-1"),
        routed(stack, "The app crashes when I upload a file"),
    ]
    chat = nrt("chat", "I was charged twice", "--max-tokens", "6", cwd=elsewhere)
    hop = re.search(r"^\[router -> (billing|legal) \(intent (\w+)\)\]$", chat.stderr, re.MULTILINE)
    assert hop, chat.stderr
    assert re.search(rf"^\[router \d+ms -> {hop.group(1)} \d+ms\]$", chat.stderr, re.MULTILINE), chat.stderr
    assert chat.stdout.strip(), "the chat printed no answer"

    # -- the replayed log (`nrt replay`, no flag) equals the live state (cluster_state's fold of
    # the log), whole, once every event of the traffic is recorded and none arrives while the two
    # are read. Heartbeats are not events, and nothing else happens on its own this soon (a
    # session's KV is swept after lru.idle_threshold, 5 minutes by default).
    def replay_equals_live(requests_sent: int) -> dict[str, Any] | None:
        before = live_state(stack)
        counters = before["counters"]
        if before["in_flight"] or min(counters["requests_completed"], counters["dispatches"]) < requests_sent:
            return None  # the log has not recorded all of the traffic yet
        replayed = json.loads(nrt("replay", "--json", cwd=elsewhere).stdout)
        after = live_state(stack)
        if before != after:
            return None  # an event was recorded meanwhile: try again
        assert replayed["position"] == after["events_applied"]  # positions are gapless from 1
        assert replayed["state"] == after
        return after

    state = eventually(lambda: replay_equals_live(4), 60, "a quiet moment to compare the replay with the live state")
    assert state["manifest_version"] == 1
    assert state["manifest_text"] == TINY
    assert state["counters"]["requests_completed"] == 4
    assert state["counters"]["requests_failed"] == 0
    assert state["sessions"]["conversation-1"]["turns"] == 2
    roles = {worker_id: info["role"] for worker_id, info in state["workers"].items()}
    (worker,) = [w for w, role in roles.items() if role == "specialist"]
    (router_host,) = [w for w, role in roles.items() if role == "router"]  # router_svc: the entry model's worker
    hosts = {"router": router_host, "billing": worker, "legal": worker}
    for model, host in hosts.items():
        assert set(state["models"][model]["placements"]) == {host}
        assert state["models"][model]["placements"][host]["tier"] in ("resident", "standby")

    # -- the ops commands find the stack without a flag too
    status = nrt("status", cwd=elsewhere).stdout
    assert "cluster tiny-ops  manifest v1" in status
    for model, host in hosts.items():
        tier = state["models"][model]["placements"][host]["tier"]
        assert re.search(rf"^{model}\s+{tier}\s.*\s{host}\s", status, re.MULTILINE), status
    for host in (worker, router_host):
        assert re.search(rf"^worker {host}\s+up\s", status, re.MULTILINE), status
    assert "sessions 1 " in status, status
    assert "requests admitted 4, completed 4, failed 0" in status, status

    as_json = json.loads(nrt("status", "--json", cwd=elsewhere).stdout)
    assert as_json["models"] == state["models"]
    assert as_json["counters"] == state["counters"]

    verified = nrt("audit", "verify", cwd=elsewhere).stdout
    checked = re.fullmatch(r"hash chain intact: (\d+) events verified\n(?:snapshots intact: .*\n)?", verified)
    assert checked, verified
    assert int(checked.group(1)) >= state["events_applied"]

    request_id, _ = requests[-1]
    listed = nrt("events", "query", "--stream", f"request:{request_id}", cwd=elsewhere)
    types = [line.split()[3] for line in listed.stdout.splitlines()]
    # the gateway's events keep their order; router_svc records its decision after forwarding, from
    # another process, so it may be stored before RequestAdmitted or after RequestCompleted
    assert sorted(types) == ["RequestAdmitted", "RequestCompleted", "RequestRouted"], listed.stdout
    assert types.index("RequestAdmitted") < types.index("RequestCompleted"), listed.stdout
    assert f"{len(types)} event(s)" in listed.stderr
    completed = nrt("events", "query", "--type", "RequestCompleted", "--json", cwd=elsewhere).stdout.splitlines()
    completed_ids = {json.loads(line)["stream_id"].removeprefix("request:") for line in completed}
    assert len(completed_ids) == 4  # the three requests and the chat
    assert {r for r, _ in requests} < completed_ids
    tail = nrt("events", "tail", "--type", "RequestCompleted", "-n", "1", "--count", "1", "--json", cwd=elsewhere)
    assert json.loads(tail.stdout)["position"] == max(json.loads(line)["position"] for line in completed)

    # -- API keys from the command line, with the stack's admin key found by itself
    made = nrt("keys", "create", "--name", "ci", "--rps", "5", cwd=elsewhere)
    key = made.stdout.strip()
    assert key.startswith("nrt-"), made.stdout
    key_id = re.search(r"^created (\w+) \(ci, infer, 5 rps\)", made.stderr, re.MULTILINE)
    assert key_id, made.stderr
    chatted = nrt("chat", "hello", "--max-tokens", "2", "--api-key", key, cwd=elsewhere)
    assert chatted.stdout.strip()
    listed_keys = nrt("keys", "list", cwd=elsewhere).stdout
    assert re.search(rf"^{key_id.group(1)}\s+ci\s+infer\s+live\s", listed_keys, re.MULTILINE), listed_keys
    assert key not in listed_keys
    as_listed = {k["key_id"]: k for k in json.loads(nrt("keys", "list", "--json", cwd=elsewhere).stdout)}
    assert {k["scope"] for k in as_listed.values()} == {"infer", "admin"}
    assert nrt("keys", "revoke", key_id.group(1), cwd=elsewhere).stdout.startswith(f"revoked {key_id.group(1)}")
    refused = nrt("chat", "hello", "--api-key", key, cwd=elsewhere, ok=False)
    assert refused.returncode != 0
    assert "401" in refused.stderr, refused.stderr
    as_infer = nrt("keys", "list", "--admin-key", stack.keys.api_key, cwd=elsewhere, ok=False)
    assert "403" in as_infer.stderr, as_infer.stderr

    # -- a service killed with SIGKILL is restarted and reported
    before = services(stack)
    assert set(before) == set(SERVICES), before
    os.kill(before["router_svc"], signal.SIGKILL)
    down = eventually(  # the gateway says so while router_svc is gone (restarted after a 1 s backoff)
        lambda: (r := httpx.get(f"{stack.url}/readyz", timeout=5)).status_code == 503 and r.json()["checks"],
        5,
        "readiness to report router_svc gone",
    )
    assert down["router"] != "ok", down
    eventually(
        lambda: re.search(
            r"nrt up: router_svc exited with -9; restarting in [\d.]+s \(restart #1\)", stack.log.read_text()
        ),
        30,
        "nrt up reports the crash",
    )
    restarted = eventually(
        lambda: (pid := services(stack).get("router_svc")) and pid != before["router_svc"] and pid,
        30,
        "a new router_svc",
    )
    # ready again once the new router_svc answers; then a routed request succeeds at once
    eventually(lambda: httpx.get(f"{stack.url}/readyz", timeout=5).status_code == 200, 60, "ready again")
    routed(stack, "I was charged twice again")
    assert services(stack) == {**before, "router_svc": restarted}  # the others were left alone
    assert stack.log.read_text().count(" exited with ") == 1
    # the new router_svc's events are recorded like the old one's: the replay still equals the live state
    state = eventually(lambda: replay_equals_live(6), 60, "the replay equal to the live state after the restart")
    assert state["counters"]["router_fired"] == 6  # four, the chat with the new key, one after the restart
    assert state["counters"]["requests_failed"] == 0

    # -- Ctrl-C: SIGINT to the foreground process group, as a terminal sends it
    children = descendants(stack.process.pid)
    assert len(children) >= 6  # nats-server, postgres, the four services
    os.killpg(stack.process.pid, signal.SIGINT)
    assert stack.process.wait(60) == 0
    survivors = [pid for pid in children if alive(pid)]
    assert survivors == [], f"processes left behind: {survivors}"
    log = stack.log.read_text()
    stopped = [m.group(1) for m in re.finditer(r"^nrt up: (\w+) stopped$", log, re.MULTILINE)]
    assert stopped == list(reversed(SERVICES)), log[-3000:]
    assert log.rstrip().endswith("nrt up: stopped"), log[-3000:]
    assert not (nrt_home / "stack" / ENDPOINTS_FILE).exists()
    for name in SERVICES:  # each service shut itself down (SIGTERM), none was killed
        service_log = (nrt_home / "stack" / "logs" / f"{name}.log").read_text()
        assert service_log.rstrip().endswith(f"{name} stopped"), service_log[-2000:]
        assert "Traceback" not in service_log, service_log[-4000:]
