"""Client commands against a running stack: ``nrt chat`` and ``nrt status``.

The gateway is found from ``--url``, else ``NRT_GATEWAY_URL``, else the endpoints file
that ``nrt up`` writes in its data directory; the API key from ``--api-key``, else
``NRT_API_KEY``, else the keys file of that local stack (only when the gateway is its own).
"""

from __future__ import annotations

import contextlib
import json
import sys
import time
from datetime import UTC, datetime
from typing import Any

import click
import httpx
from rich.live import Live

from nrt.core.units import format_size
from nrt.entrypoints.cli.settings import cli_settings
from nrt.entrypoints.cli.status_view import device_label, failure_line, last_failures, status_view
from nrt.entrypoints.stack import endpoints, keys_file


def gateway_url(url: str | None) -> str:
    url = url or cli_settings().gateway_url
    if url:
        return url.rstrip("/")
    found = endpoints.discover()
    if found is None:
        raise click.ClickException(
            "no running stack found: start one with `nrt up`, or pass --url / set NRT_GATEWAY_URL"
        )
    return found.gateway_url


def local_keys(base: str) -> keys_file.StackKeys | None:
    """The keys of the local `nrt up` stack, when ``base`` is its gateway (a key goes to no other server)."""
    found = endpoints.discover()
    if found is None or found.gateway_url.rstrip("/") != base:
        return None
    return keys_file.read()


def auth_headers(base: str, given: str | None, admin: bool = False) -> dict[str, str]:
    """``Authorization`` for ``base``: the key given, else its variable, else the local stack's (none: no header)."""
    settings = cli_settings()
    configured = settings.admin_key if admin else settings.api_key
    key = given or (configured.get_secret_value() if configured is not None else None)
    if key is None and (local := local_keys(base)) is not None:
        key = local.admin_key if admin else local.api_key
    return {"Authorization": f"Bearer {key}"} if key else {}


def watch_status(base: str, headers: dict[str, str], interval: float, count: int | None) -> None:
    """Redraw ``/v1/cluster`` every ``interval`` seconds (``count`` times, or until Ctrl-C)."""
    drawn = 0
    with httpx.Client(base_url=base, timeout=10, headers=headers) as client, Live(auto_refresh=False) as live:
        while count is None or drawn < count:
            response = client.get("/v1/cluster")
            if response.status_code >= 400:
                raise http_error(response)
            live.update(status_view(response.json(), response.headers.get(STATE_SOURCE_HEADER)), refresh=True)
            drawn += 1
            if count is None or drawn < count:
                time.sleep(interval)


def http_error(response: httpx.Response) -> click.ClickException:
    try:
        message = response.json()["error"]["message"]
    except (ValueError, KeyError, TypeError):
        message = response.text[:300]
    if response.status_code == 401:
        message += " (give a key with --api-key or NRT_API_KEY; `nrt up` writes its keys to its data directory)"
    return click.ClickException(f"{response.status_code}: {message}")


STATE_SOURCE_HEADER = "X-NRT-State-Source"  # who folded the state: cluster_state, or the gateway itself
API_KEY_HELP = "API key (NRT_API_KEY; default: the local `nrt up` stack's)"


@click.command()
@click.argument("message")
@click.option("--model", default="router", show_default=True, help="the entry model (routed) or a model id (direct)")
@click.option("--session", default=None, help="conversation id: the worker keeps its KV cache between turns")
@click.option("--max-tokens", type=int, default=None)
@click.option("--url", default=None, help="gateway URL (NRT_GATEWAY_URL; default: the local `nrt up` stack)")
@click.option("--api-key", default=None, help=API_KEY_HELP)
def chat(
    message: str, model: str, session: str | None, max_tokens: int | None, url: str | None, api_key: str | None
) -> None:
    """Send MESSAGE, stream the answer, and show the hop the router chose."""
    base = gateway_url(url)
    body: dict[str, Any] = {"model": model, "stream": True, "messages": [{"role": "user", "content": message}]}
    if max_tokens is not None:
        body["max_tokens"] = max_tokens
    headers = auth_headers(base, api_key)
    if session:
        headers["X-NRT-Session"] = session
    hop: str | None = None
    nrt_block: dict[str, Any] | None = None
    with (
        httpx.Client(timeout=httpx.Timeout(10, read=300)) as client,
        client.stream("POST", f"{base}/v1/chat/completions", json=body, headers=headers) as response,
    ):
        if response.status_code >= 400:
            response.read()
            raise http_error(response)
        for line in response.iter_lines():
            if not line.startswith("data:"):
                continue
            data = line.removeprefix("data:").strip()
            if data == "[DONE]":
                break
            chunk = json.loads(data)
            if "error" in chunk:
                raise click.ClickException(chunk["error"].get("message", "the stream failed"))
            nrt_block = chunk.get("nrt") or nrt_block
            for choice in chunk.get("choices", []):
                delta = choice.get("delta") or {}
                for call in delta.get("tool_calls") or []:
                    args = json.loads(call.get("function", {}).get("arguments") or "{}")
                    hop = f"[router -> {args.get('target')} (intent {args.get('intent')})]"
                    click.secho(hop, fg="cyan", err=True)
                if delta.get("content"):
                    click.echo(delta["content"], nl=False)
                    sys.stdout.flush()
    click.echo()
    if nrt_block:
        hops = " -> ".join(f"{h.get('model')} {h.get('latency_ms', 0):.0f}ms" for h in nrt_block.get("hops", []))
        click.secho(f"[{hops}]", fg="cyan", err=True)


@click.command()
@click.option("--url", default=None, help="gateway URL (NRT_GATEWAY_URL; default: the local `nrt up` stack)")
@click.option("--json", "as_json", is_flag=True, help="print the cluster state as JSON")
@click.option("--api-key", default=None, help=API_KEY_HELP)
@click.option("--watch", is_flag=True, help="redraw the picture live until interrupted (Ctrl-C)")
@click.option(
    "--interval",
    type=click.FloatRange(min=0.1),
    default=1.0,
    show_default=True,
    help="--watch: seconds between redraws",
)
@click.option("--count", type=click.IntRange(min=1), default=None, help="--watch: stop after this many redraws")
def status(
    url: str | None, as_json: bool, api_key: str | None, watch: bool, interval: float, count: int | None
) -> None:
    """Tiers, memory, sessions and the manifest version of a running stack (live with --watch)."""
    base = gateway_url(url)
    headers = auth_headers(base, api_key)
    if watch:
        if as_json:
            raise click.UsageError("--watch draws tables; it does not go with --json")
        with contextlib.suppress(KeyboardInterrupt):  # Ctrl-C: the way out of a watch, not an error
            watch_status(base, headers, interval, count)
        return
    response = httpx.get(f"{base}/v1/cluster", timeout=10, headers=headers)
    if response.status_code >= 400:
        raise http_error(response)
    state = response.json()
    if as_json:
        click.echo(json.dumps(state, indent=2))
        return
    click.echo(
        f"cluster {state.get('cluster')}  manifest v{state.get('manifest_version')}"
        f"{'  DRAINING' if state.get('draining') else ''}"
    )
    workers = state.get("workers", {})
    for worker in workers.values():
        alive = "up" if worker.get("alive", True) else "lost"
        device = device_label(worker.get("device"))
        click.echo(
            f"worker {worker['worker_id']:<24} {alive:<5} {worker.get('cpu_count')} cpus, "
            f"{format_size(int(worker.get('ram_bytes', 0)))} ram" + (f", {device}" if device else "")
        )
    sessions = state.get("sessions", {})
    kv_by: dict[tuple[str, str], list[int]] = {}  # (model, worker) -> KV bytes of each session holding KV
    for s in sessions.values():
        if not s.get("kv_evicted"):
            kv_by.setdefault((s["model_id"], s["worker_id"]), []).append(int(s.get("kv_bytes", 0)))
    click.echo(f"\n{'model':<16}{'tier':<10}{'held':>10}  {'worker':<24}{'requests':>9}  {'sessions (KV)':>14}")
    for model in state.get("models", {}).values():
        placements = model.get("placements", {}) or {"-": {"tier": "unplaced", "bytes_held": 0}}
        for worker_id, placement in placements.items():
            held = format_size(int(placement.get("bytes_held", 0)))
            held_kv = kv_by.get((model["model_id"], worker_id), [])
            click.echo(
                f"{model['model_id']:<16}{placement['tier']:<10}{held:>10}  {worker_id:<24}{model.get('requests', 0):>9}"
                f"  {f'{len(held_kv)} ({format_size(sum(held_kv))})':>14}"
            )
    failures = last_failures(state)
    if failures:
        click.echo("\nload failures (the last per model)")
        now = datetime.now(UTC)
        for failure in failures:
            click.echo(f"  {failure_line(failure, now)}")
    kv = sum(int(s.get("kv_bytes", 0)) for s in sessions.values())
    counters = state.get("counters", {})
    click.echo(f"\nsessions {len(sessions)} (KV {format_size(kv)})  in flight {len(state.get('in_flight', {}))}")
    click.echo(
        "requests "
        + ", ".join(f"{k.removeprefix('requests_')} {v}" for k, v in counters.items() if k.startswith("requests_"))
    )
