"""`nrt up` on a manifest whose models are all operators' own: the spec example's router and its three
Phi-3 specialists as ``hf://`` sources, resolved from a Hugging Face cache that holds checkpoints of
those names (built here: the Hub is not reachable), prepared by the workers on load, and serving a
routed, streamed answer end to end. The log records the commit of each model's weights."""

from __future__ import annotations

import json
import time
from pathlib import Path

import psycopg
from openai import OpenAI

from nrt.adapters.infra.pgurl import to_libpq
from nrt.testing.hf_checkpoints import put_in_cache, save_checkpoint

# the spec example's models, as hf:// sources (its Anthropic fallback is served by anthropic://, not the Hub)
MANIFEST = """\
cluster: customer-support-agent
resources: {gpu_budget: 18GB, ram_budget: 32GB}
models:
  router:
    source: hf://neurometric/router-1b-v2
    tier: resident
    priority: critical
    max_active_sessions: 16
    confidence_threshold: 0.0
  specialists:
    - {id: billing, source: hf://neurometric/billing-phi3, tier: resident, co_activation: router}
    - {id: technical, source: hf://neurometric/tech-phi3, tier: resident, co_activation: router}
    - {id: legal, source: hf://neurometric/legal-phi3, tier: standby, promotion_hint: on_router_classification}
routing:
  entry: router
  dispatch_rule: router.output.intent -> specialists.{intent}
"""
REPOS = {
    "neurometric/router-1b-v2": "llama",
    "neurometric/billing-phi3": "phi3",
    "neurometric/tech-phi3": "phi3",
    "neurometric/legal-phi3": "phi3",
}


def test_nrt_up_serves_a_manifest_of_hf_sources_from_the_hugging_face_cache(  # type: ignore[no-untyped-def]
    start_stack, tmp_path: Path
) -> None:
    cache = tmp_path / "hf-cache"
    commits = {
        repo: put_in_cache(cache, repo, save_checkpoint(tmp_path / repo.replace("/", "--"), kind, seed=seed))
        for seed, (repo, kind) in enumerate(REPOS.items())
    }
    manifest = tmp_path / "spec-hf.yaml"
    manifest.write_text(MANIFEST)
    offline = {"HF_HUB_CACHE": str(cache), "HF_HUB_OFFLINE": "1", "NRT_HOME": str(tmp_path / "nrt-home")}
    stack = start_stack(manifest, extra_env=offline)

    client = OpenAI(base_url=f"{stack.url}/v1", api_key=stack.keys.api_key)
    stream = client.chat.completions.create(
        model="router",
        messages=[{"role": "user", "content": "I was charged twice this month"}],
        max_tokens=6,
        stream=True,
    )
    text, finish, calls = "", None, []
    for chunk in stream:
        for choice in chunk.choices:
            text += choice.delta.content or ""
            finish = choice.finish_reason or finish
            calls.extend(choice.delta.tool_calls or [])
    assert finish in ("stop", "length")
    [call] = calls
    assert json.loads(call.function.arguments)["target"] in ("billing", "technical", "legal")

    with psycopg.connect(to_libpq(stack.endpoints.database_url), autocommit=True) as conn:
        deadline = time.monotonic() + 30
        while True:
            rows = conn.execute(
                "SELECT body::json->'weights'->>'source' FROM events WHERE type = 'TierChanged' "
                "AND body::json->'weights' IS NOT NULL AND body::json->>'weights' <> 'null'"
            ).fetchall()
            loaded = {row[0] for row in rows}
            if len(loaded) >= 3 or time.monotonic() > deadline:
                break
            time.sleep(0.3)
    pinned = {f"hf://{repo}@{commit}" for repo, commit in commits.items()}
    assert {f"hf://neurometric/router-1b-v2@{commits['neurometric/router-1b-v2']}"} <= loaded <= pinned
    assert len(loaded) >= 3  # the router and the two resident specialists, each at its commit
