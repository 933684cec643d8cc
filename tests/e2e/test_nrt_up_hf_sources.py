"""`nrt up` on the NRT spec's example manifest, verbatim: its router and three Phi-3 specialists are
``hf://`` sources, resolved from a Hugging Face cache that holds checkpoints of those names (built
here: the Hub is not reachable), prepared by the workers on load, and serving a routed, streamed
answer end to end. Its fallback, ``hf://anthropic/claude-haiku`` at ``tier: remote``, is served by an
inference endpoint of Hub models: here a protocol fixture that speaks OpenAI's chat completions (the
worker's ``NRT_WORKER_HF_INFERENCE_URL`` points at it; by default it is Hugging Face's router, with the
key in $HF_TOKEN). The log records the commit of each model's weights."""

from __future__ import annotations

import json
import shutil
import time
from pathlib import Path

import psycopg
from openai import OpenAI

from nrt.adapters.infra.pgurl import to_libpq
from nrt.testing.hf_checkpoints import put_in_cache, save_checkpoint
from openai_protocol_fixture import ANSWER, Seen, openai_app, serve_in_thread
from paths import FIXTURES
from stack_processes import Stack

SPEC = FIXTURES / "spec-customer-support.yaml"  # the spec's example, byte for byte
REPOS = {
    "neurometric/router-1b-v2": "llama",
    "neurometric/billing-phi3": "phi3",
    "neurometric/tech-phi3": "phi3",
    "neurometric/legal-phi3": "phi3",
}
FALLBACK_REPO = "anthropic/claude-haiku"
HF_TOKEN = "hf_fixture_token"


def test_nrt_up_serves_the_spec_manifest_from_the_hugging_face_cache(  # type: ignore[no-untyped-def]
    start_stack, tmp_path: Path
) -> None:
    cache = tmp_path / "hf-cache"
    commits = {
        repo: put_in_cache(cache, repo, save_checkpoint(tmp_path / repo.replace("/", "--"), kind, seed=seed))
        for seed, (repo, kind) in enumerate(REPOS.items())
    }
    manifest = tmp_path / "customer-support.yaml"
    shutil.copyfile(SPEC, manifest)
    seen = Seen()
    with serve_in_thread(openai_app(HF_TOKEN, (FALLBACK_REPO,), seen)) as endpoint:
        offline = {
            "HF_HUB_CACHE": str(cache),
            "HF_HUB_OFFLINE": "1",
            "NRT_HOME": str(tmp_path / "nrt-home"),
            "NRT_WORKER_HF_INFERENCE_URL": f"{endpoint}/v1",
            "HF_TOKEN": HF_TOKEN,
        }
        stack = start_stack(manifest, extra_env=offline)
        client = OpenAI(base_url=f"{stack.url}/v1", api_key=stack.keys.api_key)
        routed(client)
        direct = client.chat.completions.create(
            model="fallback", messages=[{"role": "user", "content": "anything else?"}], max_tokens=8
        )
    assert direct.choices[0].message.content == "".join(ANSWER)
    assert seen.bodies, "the fallback's endpoint was not called"
    assert {body["model"] for body in seen.bodies} == {FALLBACK_REPO}
    assert {headers["authorization"] for headers in seen.headers} == {f"Bearer {HF_TOKEN}"}
    assert_weights_recorded(stack, commits)


def routed(client: OpenAI) -> None:
    """A request the router classifies (its random weights pick some route): a streamed answer."""
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
    assert json.loads(call.function.arguments)["target"] in ("billing", "technical", "legal", "fallback")


def assert_weights_recorded(stack: Stack, commits: dict[str, str]) -> None:
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
