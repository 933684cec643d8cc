"""``nrt keys``: create, list and revoke the API keys of a running stack (with an admin key).

The gateway and the admin key are found as for ``nrt chat``: ``--url`` / ``NRT_GATEWAY_URL``
else the local ``nrt up`` stack; ``--admin-key`` / ``NRT_ADMIN_KEY`` else that stack's keys file.
"""

from __future__ import annotations

import json
from typing import Any

import click
import httpx

from nrt.entrypoints.cli.client import auth_headers, gateway_url, http_error

URL_HELP = "gateway URL (NRT_GATEWAY_URL; default: the local `nrt up` stack)"
ADMIN_KEY_HELP = "admin key (NRT_ADMIN_KEY; default: the local `nrt up` stack's)"


def _call(method: str, url: str | None, admin_key: str | None, path: str, body: Any = None) -> Any:
    base = gateway_url(url)
    response = httpx.request(
        method, f"{base}{path}", json=body, headers=auth_headers(base, admin_key, admin=True), timeout=30
    )
    if response.status_code >= 400:
        raise http_error(response)
    return response.json()


def _limits(key: dict[str, Any]) -> str:
    parts = []
    if key.get("rps") is not None:
        parts.append(f"{key['rps']:g} rps")
    if key.get("tokens_per_min") is not None:
        parts.append(f"{key['tokens_per_min']} tokens/min")
    return ", ".join(parts) or "no limits"


@click.group()
def keys() -> None:
    """Manage API keys (needs an admin key)."""


@keys.command()
@click.option("--name", required=True, help="what the key is for (shown in lists)")
@click.option("--scope", type=click.Choice(["infer", "admin"]), default="infer", show_default=True)
@click.option("--rps", type=click.FloatRange(min=0, min_open=True), default=None, help="requests per second")
@click.option("--tokens-per-min", type=click.IntRange(min=1), default=None, help="prompt + completion tokens a minute")
@click.option("--url", default=None, help=URL_HELP)
@click.option("--admin-key", default=None, help=ADMIN_KEY_HELP)
def create(
    name: str, scope: str, rps: float | None, tokens_per_min: int | None, url: str | None, admin_key: str | None
) -> None:
    """Create a key and print it (this once: the cluster keeps only its hash)."""
    body = {"name": name, "scope": scope, "rps": rps, "tokens_per_min": tokens_per_min}
    key = _call("POST", url, admin_key, "/v1/keys", body)
    click.echo(key["key"])
    click.echo(
        f"created {key['key_id']} ({key['name']}, {key['scope']}, {_limits(key)}); it is shown only now", err=True
    )


@keys.command(name="list")
@click.option("--url", default=None, help=URL_HELP)
@click.option("--admin-key", default=None, help=ADMIN_KEY_HELP)
@click.option("--json", "as_json", is_flag=True, help="print the keys as JSON")
def list_keys(url: str | None, admin_key: str | None, as_json: bool) -> None:
    """Every key: id, name, scope, limits, usage, revoked or not (never the key)."""
    found = _call("GET", url, admin_key, "/v1/keys")["data"]
    if as_json:
        click.echo(json.dumps(found, indent=2))
        return
    click.echo(f"{'key id':<14}{'name':<20}{'scope':<7}{'state':<9}{'requests':>9}{'tokens':>10}  limits")
    for key in found:
        usage = key.get("usage") or {}
        tokens = int(usage.get("prompt_tokens", 0)) + int(usage.get("completion_tokens", 0))
        state = "revoked" if key.get("revoked_at") else "live"
        requests = usage.get("requests", "-")
        click.echo(
            f"{key['key_id']:<14}{key['name'][:19]:<20}{key['scope']:<7}{state:<9}{requests:>9}{tokens:>10}  {_limits(key)}"
        )


@keys.command()
@click.argument("key_id")
@click.option("--url", default=None, help=URL_HELP)
@click.option("--admin-key", default=None, help=ADMIN_KEY_HELP)
def revoke(key_id: str, url: str | None, admin_key: str | None) -> None:
    """Revoke the key KEY_ID: it is refused from the next request on."""
    key = _call("DELETE", url, admin_key, f"/v1/keys/{key_id}")
    click.echo(f"revoked {key['key_id']} ({key['name']})")
