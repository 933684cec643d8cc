"""`docker compose up` for real: NRT's image built, the whole stack served, checked end to end (issue 27).

The stack is NRT's own docker-compose.yml, set up as the README tells an operator
(scripts/compose-setup: the environment file, the image, the bus credentials), in a compose
project of this test's own with free host ports, and reached only through the ports it publishes on
127.0.0.1. Where Docker Hub cannot be reached, the public images are the Debian stand-ins of
scripts/offline-images and NRT's image is built from its wheelhouse (`--offline`); Jaeger and
Grafana (the profile observability) run only where their images are there. Skipped, with the
reason, when no Docker engine answers and none can be started, or no compose is installed.

Printed (pytest -s): how long the build and `up` took, the first time in this run and again (the
second from the build cache and the volumes the first left), and the image sizes.
"""

from __future__ import annotations

import asyncio
import json
import re
import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path

import httpx
import pytest
from openai import OpenAI

from compose_kit import (
    CUDA_BASE,
    DEFAULT_IMAGES,
    OBSERVABILITY_IMAGES,
    ComposeStack,
    compose_command,
    docker_engine,
    has_image,
    image_size,
    is_stand_in,
    pull,
    run,
)
from fault_kit import Outcome, Traffic, check_log, request_events, served
from paths import ROOT

pytestmark = [pytest.mark.compose, pytest.mark.timeout(3600)]

SERVICES = ("cluster_state", "specialist_worker", "router_svc", "api_gateway")


def _readme_curl() -> str:
    """The README's first streamed chat request, as an operator copies it."""
    readme = (ROOT / "README.md").read_text()
    match = re.search(r"```bash\n(curl -N http://127\.0\.0\.1:8080/v1/chat/completions .*?)\n```", readme, re.DOTALL)
    assert match, "the README's curl example is gone"
    return match.group(1)


def _public_images() -> tuple[bool, str]:
    """Whether NRT's image builds offline, and what was done to have the public images."""
    missing = [name for name in DEFAULT_IMAGES if not has_image(name)]
    if missing and pull(missing[0]) is None:
        for name in missing[1:]:
            assert pull(name) is None, f"{missing[0]} was pulled but {name} cannot be"
        missing = []
    if missing or is_stand_in(DEFAULT_IMAGES[0]):
        # it builds what is missing and keeps the rest; the wheelhouse follows requirements.lock
        run([str(ROOT / "scripts" / "offline-images")], timeout=1800)
    offline = is_stand_in(DEFAULT_IMAGES[0])
    how = "Debian stand-ins (scripts/offline-images)" if offline else "the public images"
    return offline, how


def compose_or_skip() -> list[str]:
    """The compose command, with a Docker engine answering (started if it can be); else the test is skipped, saying why."""
    reason = docker_engine()
    if reason is not None:
        pytest.skip(reason)
    compose = compose_command()
    if compose is None:
        pytest.skip("neither `docker compose` nor `docker-compose` is installed")
    return compose


@pytest.fixture(scope="module")
def stack(tmp_path_factory: pytest.TempPathFactory) -> Iterator[ComposeStack]:
    compose = compose_or_skip()
    offline, how = _public_images()
    observability = all(has_image(name) for name in OBSERVABILITY_IMAGES)
    print(
        f"\n[compose] {' '.join(compose)}; public images: {how}; profile observability: "
        + ("on" if observability else f"off ({', '.join(n for n in OBSERVABILITY_IMAGES if not has_image(n))} missing)")
    )
    workdir = tmp_path_factory.mktemp("compose")
    stack = ComposeStack(compose, workdir)
    setup = [str(ROOT / "scripts" / "compose-setup"), "--env-file", str(stack.env_file)]
    setup += ["--offline"] * offline + ["--without-observability"] * (not observability)
    cached = has_image("nrt:latest")
    for attempt in ("first", "again"):
        started = time.monotonic()
        run(setup, stack.env, timeout=3000)
        stack.timings[f"build ({attempt}{', image cached before' if cached and attempt == 'first' else ''})"] = (
            time.monotonic() - started
        )
    stack("down", "-v", "--remove-orphans")  # what an interrupted earlier run may have left
    try:
        for attempt in ("first: fresh volumes", "again: the volumes kept"):
            started = time.monotonic()
            stack("up", "-d", timeout=1200)
            stack.wait_healthy(["postgres", "nats", *SERVICES], within=600)
            stack.wait_ready(within=300)
            stack.timings[f"up until /readyz ({attempt})"] = time.monotonic() - started
            if attempt.startswith("first"):
                stack("down", timeout=300)  # the containers go, the volumes stay
        yield stack
    finally:
        try:
            logs = stack("logs", "--tail", "30", timeout=120)
        except AssertionError as exc:
            logs = str(exc)
        stack("down", "-v", "--remove-orphans", timeout=600)
        print("\n[compose] " + "; ".join(f"{k} {v:.0f} s" for k, v in stack.timings.items()))
        print(
            f"[compose] image sizes: nrt:latest {image_size('nrt:latest') / 2**20:.0f} MiB; "
            + "; ".join(f"{n} {image_size(n) / 2**20:.0f} MiB" for n in DEFAULT_IMAGES[1:] if has_image(n))
        )
        if logs:
            print("[compose] last logs:\n" + logs[-3000:])


def test_the_runtime_image_runs_as_nrt_without_build_or_test_tools_and_with_the_models(stack: ComposeStack) -> None:
    config = json.loads(run(["docker", "image", "inspect", "-f", "{{json .Config}}", "nrt:latest"]))
    assert config["User"] == "nrt"
    assert config["Healthcheck"]["Test"] == ["CMD", "nrt-healthcheck"]
    probe = (
        "import importlib.util, os, shutil;"
        "print(os.getuid(), os.getgid());"
        "print(sorted(m for m in ('torch', 'transformers', 'optimum', 'pytest', 'mypy', 'ruff') if importlib.util.find_spec(m)));"
        "print(sorted(c for c in ('gcc', 'cc', 'g++', 'make') if shutil.which(c)));"
        "print(sorted(os.listdir('/var/lib/nrt/models')))"
    )
    out = run(["docker", "run", "--rm", "nrt:latest", "python", "-c", probe]).splitlines()
    assert out[0] == "10001 10001"
    assert out[1] == "[]", f"build or test tools in the runtime image: {out[1]}"
    assert out[2] == "[]", f"a compiler in the runtime image: {out[2]}"
    assert "gemma3-270m" in out[3], out[3]  # prepared when the image was built: no start prepares them
    assert "minilm-l6" in out[3], out[3]
    for service in SERVICES:  # every service's container is the image's user, and healthy by its check
        user = run(["docker", "exec", stack.container(service), "id", "-un"]).strip()
        assert user == "nrt", service
    print(f"\n[compose] nrt:latest {image_size('nrt:latest') / 2**20:.0f} MiB")


def test_the_readme_curl_gets_a_routed_streamed_answer(stack: ComposeStack) -> None:
    command = _readme_curl().replace("127.0.0.1:8080", f"127.0.0.1:{stack.ports['GATEWAY']}")
    done = subprocess.run(
        ["bash", "-c", command],
        env={"PATH": "/usr/bin:/bin:/usr/local/bin", "NRT_API_KEY": stack.settings["NRT_API_KEY"]},
        capture_output=True,
        text=True,
        timeout=180,
    )
    assert done.returncode == 0, done.stderr
    frames = [json.loads(line[6:]) for line in done.stdout.splitlines() if line.startswith("data: {")]
    assert done.stdout.rstrip().endswith("data: [DONE]"), done.stdout[-500:]
    calls = [c for f in frames for ch in f.get("choices", []) for c in (ch.get("delta") or {}).get("tool_calls") or []]
    assert calls, done.stdout[:1000]
    assert calls[0]["function"]["name"] == "dispatch_to_specialist", calls
    assert json.loads(calls[0]["function"]["arguments"])["intent"] == "billing"
    text = "".join((ch.get("delta") or {}).get("content") or "" for f in frames for ch in f.get("choices", []))
    assert text.strip(), "no token streamed"
    # without a key the same request is refused
    unauthorised = httpx.post(f"{stack.url}/v1/chat/completions", json={"model": "router", "messages": []}, timeout=30)
    assert unauthorised.status_code == 401


def test_the_openai_client_streams_a_routed_answer(stack: ComposeStack) -> None:
    client = OpenAI(base_url=f"{stack.url}/v1", api_key=stack.settings["NRT_API_KEY"])
    stream = client.chat.completions.create(
        model="router",
        messages=[{"role": "user", "content": "The app crashes when I upload a file"}],
        stream=True,
        max_tokens=16,
        extra_headers={"X-NRT-Session": "compose-test-42"},
    )
    routed: list[dict[str, str]] = []
    text = ""
    for chunk in stream:
        delta = chunk.choices[0].delta if chunk.choices else None
        if delta and delta.tool_calls:
            function = delta.tool_calls[0].function
            routed.append(json.loads(function.arguments or "{}") if function else {})
        elif delta and delta.content:
            text += delta.content
    assert routed, "no dispatch_to_specialist call streamed"
    assert routed[0]["intent"] == "technical", routed
    assert text.strip()


def _nrt(*args: str) -> str:
    """``nrt ARGS`` on this host, as an operator runs it against the compose stack's PostgreSQL."""
    return run([sys.executable, "-m", "nrt.entrypoints.cli.main", *args], timeout=300)


def test_replay_and_audit_verify_against_the_compose_postgresql(stack: ComposeStack) -> None:
    verified = _nrt("audit", "verify", "--database-url", stack.database_url)
    assert re.match(r"hash chain intact: \d+ events verified", verified), verified

    def replay_equals_live() -> bool:
        before = httpx.get(f"{stack.url}/v1/cluster", headers=stack.admin_headers, timeout=10).json()
        replayed = json.loads(_nrt("replay", "--json", "--database-url", stack.database_url))
        after = httpx.get(f"{stack.url}/v1/cluster", headers=stack.admin_headers, timeout=10).json()
        return bool(before == after and replayed["state"] == after)

    deadline = time.monotonic() + 60
    while not replay_equals_live():
        assert time.monotonic() < deadline, "the replayed log never equalled /v1/cluster"
        time.sleep(2)


async def _traffic_across_a_restart(stack: ComposeStack) -> tuple[list[Outcome], float]:
    traffic = Traffic(stack.url, stack.headers, concurrency=3, max_tokens=4)
    traffic.start()
    await asyncio.sleep(8)
    started = time.monotonic()
    await asyncio.to_thread(stack, "restart", "specialist_worker")
    # until the restarted worker serves again
    deadline = time.monotonic() + 300
    while not any(served(o) and o.sent_at > started for o in traffic.outcomes):
        assert time.monotonic() < deadline, "the stack did not serve again after the worker's restart"
        await asyncio.sleep(1)
    back = time.monotonic() - started
    await asyncio.sleep(5)
    return await traffic.stop(), back


def test_a_worker_restarted_under_traffic_loses_no_request_from_the_log(stack: ComposeStack) -> None:
    earlier = set(asyncio.run(request_events(stack.database_url)))  # the requests of the tests before
    outcomes, back = asyncio.run(_traffic_across_a_restart(stack))
    env = {"NRT_DATABASE_URL": stack.database_url, "NRT_NATS_URL": f"nats://127.0.0.1:{stack.ports['NATS']}"}
    report = check_log(outcomes, stack.database_url, stack.url, stack.admin_headers, env, earlier)
    assert report.served > 0
    print(
        f"\n[compose] restart specialist_worker under traffic: serving again after {back:.1f} s; "
        f"{report.requests} requests, {report.admitted} admitted, {report.served} served, "
        f"{report.events_checked} request events checked, {report.chain_events} events in the chain"
    )


def test_the_gpu_profile_builds_its_cuda_image_where_its_base_can_be_pulled(tmp_path: Path) -> None:
    compose = compose_or_skip()
    if not has_image(CUDA_BASE) and (why := pull(CUDA_BASE)) is not None:
        pytest.skip(f"the GPU profile's base image cannot be had here: {why}")
    stack = ComposeStack(compose, tmp_path, project="nrt-compose-gpu-test")
    run(
        [str(ROOT / "scripts" / "compose-setup"), "--env-file", str(stack.env_file), "--without-observability"],
        stack.env,
        3000,
    )
    stack.timed("build gpu", "--profile", "gpu", "build", "specialist_worker_gpu", timeout=3000)
    config = json.loads(run(["docker", "image", "inspect", "-f", "{{json .Config}}", "nrt:cuda"]))
    assert config["User"] == "nrt"
    print(f"\n[compose] nrt:cuda built in {stack.timings['build gpu']:.0f} s, {image_size('nrt:cuda') / 2**20:.0f} MiB")
