"""What-if end to end: traffic recorded through the real services, then a candidate's report.

The gateway, router_svc, a specialist worker and cluster_state run over real NATS and
PostgreSQL (``start_stack`` with a database) on the tiny support manifest with
``audit: {record_prompts: true}``; requests go through the official ``openai`` client. Then
``nrt replay --what-if candidate.yaml --json`` (the CLI against the test database) and
``PUT /v1/manifest?dry_run=true`` (through cluster_state) report the same for a candidate that
moves the billing intent to the technical specialist, and exit 2 / ``ok: false`` for one whose
residents exceed its budget; neither applies anything.
"""

from __future__ import annotations

import asyncio
import json
import time
from pathlib import Path
from typing import Any

from click.testing import CliRunner, Result

from harness import ADMIN_KEY, Stack, start_stack
from nrt.adapters.store import EventStore
from nrt.core.events import RequestAdmitted, RequestRouted
from nrt.entrypoints.cli.main import cli

BILLING = "I was charged twice for my order"
TECHNICAL = "the app crashes when I open it"
OTHER = "what is the weather like on the moon"
DRAIN = "drain: {timeout: 5s, admission_wait: 1s}"
RECORDING = (DRAIN, DRAIN + "\naudit: {record_prompts: true}")
FORMAT: Any = {"type": "json_schema", "json_schema": {"name": "any", "schema": {"type": "object"}}}


async def ask(stack: Stack, text: str, **extra: Any) -> None:
    reply = await stack.client().chat.completions.create(
        model="router", messages=[{"role": "user", "content": text}], max_tokens=2, **extra
    )
    assert reply.choices[0].message is not None


async def routed(store: EventStore, count: int, within: float = 15.0) -> list[RequestRouted]:
    """The log's RequestRouted events, once there are ``count`` (events arrive after the answers)."""
    deadline = time.monotonic() + within
    while True:
        found = [r.event for r in await store.query(types=["RequestRouted"]) if isinstance(r.event, RequestRouted)]
        if len(found) >= count:
            return found
        assert time.monotonic() < deadline, f"{len(found)} of {count} RequestRouted in the log"
        await asyncio.sleep(0.1)


async def what_if_cli(candidate: Path, database_url: str, *extra: str) -> Result:
    """``nrt replay --what-if`` in a thread of its own (the CLI runs its own event loop)."""
    args = ["replay", "--what-if", str(candidate), "--database-url", database_url, *extra]
    return await asyncio.to_thread(CliRunner().invoke, cli, args)


async def dry_run(stack: Stack, text: str) -> Any:
    async with stack.http(ADMIN_KEY) as http:
        reply = await http.put("/v1/manifest", params={"dry_run": "true"}, content=text.encode(), timeout=120)
    assert reply.status_code == 200, reply.text
    return reply.json()


async def test_a_candidate_moving_an_intent_is_reported_by_the_cli_and_the_dry_run_alike(
    nats_url: str, nrt_home: Path, database_url: str, event_store: EventStore, tmp_path: Path
) -> None:
    async with start_stack(nats_url, "tiny-support.yaml", edit=RECORDING, database_url=database_url) as stack:
        for text in (BILLING, BILLING, OTHER):
            await ask(stack, text)
        await ask(stack, TECHNICAL, response_format=FORMAT)  # constrained: recorded so, its schema with the prompt
        decisions = await routed(event_store, 4)
        assert [(e.intent, e.target) for e in decisions] == [
            ("billing", "billing"),
            ("billing", "billing"),
            (None, "fallback"),
            ("technical", "technical"),
        ]
        admitted = [r.event for r in await event_store.query(types=["RequestAdmitted"])]
        assert [e.prompt for e in admitted if isinstance(e, RequestAdmitted)] == [BILLING, BILLING, OTHER, TECHNICAL]
        assert [(e.constrained, e.constraint) for e in admitted if isinstance(e, RequestAdmitted)][2:] == [
            (None, None),
            ("json_schema", '{"type":"object"}'),
        ]

        moved = stack.manifest.text.replace("specialists.{intent}", "specialists.technical")
        candidate = tmp_path / "candidate.yaml"
        candidate.write_text(moved)
        result = await what_if_cli(candidate, database_url, "--json")
        assert result.exit_code == 0, result.output
        report = json.loads(result.output)
        changes = {(c["before"]["target"], c["after"]["target"], c["before"]["intent"]): c for c in report["changes"]}
        assert set(changes) == {("billing", "technical", "billing"), ("fallback", "technical", None)}
        billing = changes[("billing", "technical", "billing")]
        assert (billing["count"], billing["examples"]) == (2, [BILLING])
        assert (report["requests"], report["unchanged"], report["reclassified"]) == (4, 1, 0)
        assert report["ok"] is True
        assert report["current_version"] == 1
        assert report["constrained"] == {"json_schema": 1}

        assert await dry_run(stack, moved) == report  # the same report, from cluster_state
        shown = await what_if_cli(candidate, database_url)
        assert shown.exit_code == 0, shown.output
        assert "billing (billing)" in shown.output
        assert "billing (technical)" in shown.output
        later = await what_if_cli(candidate, database_url, "--json", "--since", "2100-01-01T00:00:00Z")
        assert json.loads(later.output)["requests"] == 0

        over = moved.replace("cluster: tiny-support", "cluster: tiny-support\nresources: {gpu_budget: 1KB}", 1)
        candidate.write_text(over)
        result = await what_if_cli(candidate, database_url, "--json")
        assert result.exit_code == 2, result.output
        broken = json.loads(result.output)
        assert broken["ok"] is False
        # the residents do not fit, and the technical specialist's warm-ups would be refused
        assert [v["code"] for v in broken["violations"]] == ["over_budget", "promotion_refused"]
        assert broken["violations"][1]["message"].startswith("technical: ")
        assert "gpu_budget" in broken["violations"][0]["message"]
        assert (await dry_run(stack, over))["violations"] == broken["violations"]

        assert stack.cluster_state is not None
        assert stack.cluster_state.controller.cluster.manifest_version == 1  # nothing was applied
