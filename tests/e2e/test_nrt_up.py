"""`nrt up` end to end: a routed, streamed answer through the official openai client, the
events in PostgreSQL, and a clean stop that leaves no process behind."""

from __future__ import annotations

import asyncio
import contextlib
import json
import os
import re
import shlex
import signal
import subprocess
import threading
import time
from pathlib import Path
from typing import Any

import httpx
import nats
import psycopg
import pytest
from openai import OpenAI
from prometheus_client.parser import text_string_to_metric_families

from nrt.adapters.infra.pgurl import to_libpq
from nrt.testing import stacks
from paths import ROOT
from stack_processes import OtlpReceiver, alive, descendants, tiny_manifest


async def _anonymous(url: str) -> None:
    client = await nats.connect(url, allow_reconnect=False, max_reconnect_attempts=0, connect_timeout=2)
    await client.close()


TINY = tiny_manifest("tiny-demo")


def test_nrt_up_serves_a_routed_stream_records_events_and_stops_cleanly(  # type: ignore[no-untyped-def]
    start_stack, otlp_receiver: OtlpReceiver, tmp_path: Path
) -> None:
    manifest = tmp_path / "tiny.yaml"
    manifest.write_text(TINY)
    tracing = {"OTEL_EXPORTER_OTLP_ENDPOINT": otlp_receiver.endpoint, "OTEL_BSP_SCHEDULE_DELAY": "100"}
    stack = start_stack(manifest, extra_env=tracing)
    assert (stack.data_dir / "keys.json").stat().st_mode & 0o777 == 0o600
    assert httpx.get(f"{stack.url}/v1/models", timeout=10).status_code == 401  # no key, no answer
    client = OpenAI(base_url=f"{stack.url}/v1", api_key=stack.keys.api_key)
    stream = client.chat.completions.create(
        model="router",
        messages=[{"role": "user", "content": "I was charged twice this month"}],
        max_tokens=8,
        stream=True,
    )
    tool_calls, text, finish, request_id = [], "", None, None
    for chunk in stream:
        request_id = chunk.id.removeprefix("chatcmpl-")
        for choice in chunk.choices:
            tool_calls.extend(choice.delta.tool_calls or [])
            text += choice.delta.content or ""
            finish = choice.finish_reason or finish
    assert finish in ("stop", "length")
    assert len(tool_calls) == 1
    call = tool_calls[0]
    assert call.function.name == "dispatch_to_specialist"
    arguments = json.loads(call.function.arguments)
    assert arguments["target"] in ("billing", "legal")
    assert text

    with psycopg.connect(to_libpq(stack.endpoints.database_url), autocommit=True) as conn:
        deadline = time.monotonic() + 30  # the stream has ended; cluster_state records the events just after
        while True:
            rows = conn.execute(
                "SELECT type FROM events WHERE stream_id = %s ORDER BY position", (f"request:{request_id}",)
            ).fetchall()
            types = [r[0] for r in rows]
            if len(types) >= 3 or time.monotonic() > deadline:
                break
            time.sleep(0.2)
        # who asked, the router's decision and its dispatch (one fact), the outcome: the gateway's
        # events keep their order; router_svc records its decision after forwarding, from another
        # process, so it may be stored before or after either of them
        assert sorted(types) == ["RequestAdmitted", "RequestCompleted", "RequestRouted"]
        assert types.index("RequestAdmitted") < types.index("RequestCompleted")
        applied = conn.execute("SELECT count(*) FROM events WHERE type = 'ManifestApplied'").fetchone()
        assert applied == (1,)
        tiers = conn.execute("SELECT count(*) FROM events WHERE type = 'TierChanged'").fetchone()
        assert tiers is not None
        assert tiers[0] >= 3

    folded = httpx.get(f"{stack.url}/v1/cluster", timeout=10, headers=stack.headers())
    assert folded.headers["x-nrt-state-source"] == "cluster_state"  # the fold of the PostgreSQL log
    assert folded.json()["manifest_version"] == 1
    assert folded.json()["counters"]["requests_admitted"] >= 1

    # each process serves its Prometheus metrics where endpoints.json says (the gateway's without a key)
    assert set(stack.endpoints.metrics) == {"api_gateway", "router_svc", "specialist_worker", "cluster_state"}
    counted = {
        "api_gateway": "nrt_requests",
        "router_svc": "nrt_router_decisions",
        "specialist_worker": "nrt_tier_transitions",
        "cluster_state": "nrt_events_recorded",
    }
    for service, family in counted.items():
        scraped = httpx.get(stack.endpoints.metrics[service], timeout=10)
        assert scraped.status_code == 200, service
        values = {f.name: sum(s.value for s in f.samples) for f in text_string_to_metric_families(scraped.text)}
        assert values.get(family, 0) > 0, f"{service}: {family} in {sorted(values)}"

    # one trace across the four processes, exported over OTLP/HTTP by each of them
    hops = {"api_gateway", "router_svc", "specialist_worker"}
    deadline = time.monotonic() + 20
    while True:
        roots = [
            span
            for service, span in list(otlp_receiver.spans)
            if service == "api_gateway"
            and any(a.key == "nrt.request_id" and a.value.string_value == request_id for a in span.attributes)
        ]
        trace = [
            (service, span)
            for service, span in list(otlp_receiver.spans)
            if roots and span.trace_id == roots[0].trace_id
        ]
        if hops <= {service for service, _ in trace} or time.monotonic() > deadline:
            break
        time.sleep(0.2)
    assert roots, f"the gateway exported no span for the request ({len(otlp_receiver.spans)} spans received)"
    assert hops <= {service for service, _ in trace}, sorted({(service, span.name) for service, span in trace})
    ids = {span.span_id for _, span in trace}
    assert roots[0].parent_span_id == b""  # the gateway's span is the root ...
    assert all(span.parent_span_id in ids for _, span in trace if span is not roots[0])  # ... of every hop
    # gateway -> router_svc (the entry model classifies there, in-process) -> the specialist's worker
    named = {span.name: (service, span) for service, span in trace}
    by_id = {span.span_id: span.name for _, span in trace}
    target = arguments["target"]
    assert named["router_svc route"][0] == "router_svc"
    assert by_id[named["router_svc route"][1].parent_span_id] == roots[0].name
    assert by_id[named["router_svc classify router"][1].parent_span_id] == "router_svc route"
    assert by_id[named[f"router_svc dispatch {target}"][1].parent_span_id] == "router_svc route"
    serve = named[f"nats serve nrt.infer.{target}"]
    assert serve[0] == "specialist_worker"
    assert by_id[serve[1].parent_span_id] == f"router_svc dispatch {target}"
    assert not [name for name in named if "nrt.infer.router" in name]  # no NATS hop to the router model

    # the bus admits only the stack's own identities, made on this first run (README: Security: the bus)
    assert (stack.data_dir / "bus" / "nats-server.conf").is_file()
    with pytest.raises(nats.errors.Error, match=r"(?i)authorization"):
        asyncio.run(_anonymous(stack.endpoints.nats_url))

    children = descendants(stack.process.pid)
    assert len(children) >= 6  # nats-server, postgres, the four services
    stack.process.send_signal(signal.SIGTERM)
    assert stack.process.wait(60) == 0
    survivors = [pid for pid in children if alive(pid)]
    assert survivors == [], f"processes left behind: {survivors}"
    assert "nrt up: stopped" in stack.log.read_text()


def _readme_curl() -> str:
    readme = (ROOT / "README.md").read_text()
    match = re.search(r"```bash\n(curl -N http://127\.0\.0\.1:8080/v1/chat/completions.+?)\n```", readme, re.DOTALL)
    assert match, "the README must show a curl example against http://127.0.0.1:8080"
    return match.group(1).replace("\\\n", " ")


@pytest.mark.slow
def test_the_readme_curl_example_gets_a_routed_answer_from_real_models(start_stack) -> None:  # type: ignore[no-untyped-def]
    stack = start_stack(ROOT / "manifests" / "customer-support.yaml")
    command = _readme_curl().replace("http://127.0.0.1:8080", stack.url).replace("$NRT_API_KEY", stack.keys.api_key)
    done = subprocess.run(shlex.split(command), capture_output=True, text=True, timeout=300, check=True)
    frames = [line.removeprefix("data: ") for line in done.stdout.splitlines() if line.startswith("data: ")]
    assert frames[-1] == "[DONE]"
    chunks = [json.loads(f) for f in frames[:-1]]
    calls = [c for chunk in chunks for choice in chunk["choices"] for c in choice["delta"].get("tool_calls") or []]
    assert calls[0]["function"]["name"] == "dispatch_to_specialist"
    assert json.loads(calls[0]["function"]["arguments"])["target"] == "billing"
    answer = "".join(choice["delta"].get("content") or "" for chunk in chunks for choice in chunk["choices"])
    assert len(answer.split()) >= 3, answer


def test_nrt_up_again_with_another_manifest_applies_it_as_the_next_version(  # type: ignore[no-untyped-def]
    start_stack, tmp_path: Path
) -> None:
    first = tmp_path / "first.yaml"
    first.write_text(TINY)
    stack = start_stack(first)
    stack.process.send_signal(signal.SIGTERM)
    assert stack.process.wait(60) == 0

    # the same data directory, another manifest: legal goes, support comes
    second = tmp_path / "second.yaml"
    second.write_text(TINY.replace("id: legal", "id: support"))
    stack = start_stack(second)
    said = stack.log.read_text()
    assert f"{second} differs from manifest v1 in force: cluster_state applies it as v2" in said, said
    assert "adds support; drops legal" in said, said
    assert re.search(r"manifest v1 -> v2 \(.*second\.yaml\): adds support; drops legal", said), said
    served = httpx.get(f"{stack.url}/v1/manifest", headers=stack.headers(), timeout=10).json()
    assert (served["version"], served["text"]) == (2, second.read_text())
    models = {m["id"] for m in httpx.get(f"{stack.url}/v1/models", headers=stack.headers(), timeout=10).json()["data"]}
    assert "support" in models
    assert "legal" not in models


def test_requests_cut_off_by_a_killed_stack_are_ended_at_restart_and_hold_no_swap(  # type: ignore[no-untyped-def]
    start_stack, tmp_path: Path
) -> None:
    manifest = tmp_path / "tiny.yaml"
    manifest.write_text(TINY)
    stack = start_stack(manifest, extra_env={"NRT_MISSED_HEARTBEATS": "40"})  # a frozen worker is not lost soon
    processes = descendants(stack.process.pid)
    worker = next(p for p in processes if b"specialist_worker" in Path(f"/proc/{p}/cmdline").read_bytes())
    os.kill(worker, signal.SIGSTOP)  # the worker freezes: the requests sent to it stay in flight

    def ask() -> None:
        body = {"model": "billing", "stream": True, "messages": [{"role": "user", "content": "hello"}]}
        with contextlib.suppress(httpx.HTTPError):
            httpx.post(f"{stack.url}/v1/chat/completions", json=body, headers=stack.headers(), timeout=120)

    askers = [threading.Thread(target=ask, daemon=True) for _ in range(3)]
    for asker in askers:
        asker.start()
    cut = set(stacks.eventually(lambda: len(in_flight(stack) or {}) == 3 and in_flight(stack), 30, "3 in flight"))

    for pid in [stack.process.pid, *processes]:  # the whole stack killed at once, no goodbye
        with contextlib.suppress(ProcessLookupError):
            os.kill(pid, signal.SIGKILL)
    stack.process.wait(10)

    stack = start_stack(manifest)  # the same data directory
    stacks.eventually(lambda: in_flight(stack) == {}, 30, "the cut requests ended")
    with psycopg.connect(to_libpq(stack.endpoints.database_url), autocommit=True) as conn:
        rows = conn.execute("SELECT body FROM events WHERE type = 'RequestFailed'").fetchall()
    ended = {row[0]["request_id"]: row[0]["code"] for row in rows}
    assert ended == dict.fromkeys(cut, "owner_lost")

    started = time.monotonic()
    swapped = httpx.put(
        f"{stack.url}/v1/manifest",
        content=TINY.replace("id: legal", "id: support"),
        headers=stack.headers(admin=True),
        timeout=120,
    )
    assert swapped.status_code == 200, swapped.text
    assert (swapped.json()["abandoned"], swapped.json()["to_version"]) == (0, 2)
    assert time.monotonic() - started < 20  # the 30 s drain timeout is not waited out


def in_flight(stack: Any) -> dict[str, int] | None:
    """The requests in flight in cluster_state's fold (``/v1/cluster``); None while the gateway answers with its
    own fold (cluster_state not up yet), which holds no requests."""
    response = httpx.get(f"{stack.url}/v1/cluster", headers=stack.headers(), timeout=10)
    if response.headers.get("x-nrt-state-source") != "cluster_state":
        return None
    requests: dict[str, int] = response.json()["in_flight"]
    return requests
