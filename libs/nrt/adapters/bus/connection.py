"""Connecting to NATS with reconnects that never give up, and logging what happens."""

from __future__ import annotations

import logging
from collections.abc import Callable
from typing import Any

import nats
from nats.aio.client import Client

from nrt.adapters.bus.credentials import BusCredentials
from nrt.adapters.bus.servers import parse_servers
from nrt.adapters.settings import Settings

log = logging.getLogger("nrt.adapters.bus")

# A server that stops answering (its host cut off: no reset comes) is left after this many seconds of pings
# unanswered, between PING_INTERVAL_S x MAX_OUTSTANDING_PINGS and one interval more; nats-py's defaults
# (2 minutes, 2) kept a client on a dark server for up to 6 minutes, admitting requests it could not route.
PING_INTERVAL_S = 2
MAX_OUTSTANDING_PINGS = 2


def credentials_of(settings: Settings) -> BusCredentials:
    """The bus credentials a process's settings name (NRT_NATS_NKEY_SEED_FILE, NRT_NATS_TLS_CA)."""
    return BusCredentials(seed_file=settings.nats_nkey_seed_file, tls_ca=settings.nats_tls_ca)


def reconnecting(
    url: str,
    name: str,
    connect_timeout: float = 5.0,
    credentials: BusCredentials | None = None,
    on_disconnect: Callable[[], None] | None = None,
) -> dict[str, Any]:
    """nats-py's options for a connection named ``name`` that reconnects forever, leaves a server that stops
    answering within seconds (``PING_INTERVAL_S``) and logs what happens
    (also what every service's FastStream broker connects with), authenticated by ``credentials``
    (by default, those the environment names; none: anonymous). ``on_disconnect`` is called each time
    the connection drops, before the reconnect attempts: what was in flight on it may never be answered."""
    if credentials is None:
        credentials = credentials_of(Settings.from_env())

    async def on_error(exc: Exception) -> None:
        log.warning("nats %s: %s", name, exc)

    async def on_disconnected() -> None:
        log.warning("nats %s: disconnected from %s", name, url)
        if on_disconnect is not None:
            on_disconnect()

    async def on_reconnected() -> None:
        log.info("nats %s: reconnected", name)

    async def on_discovered() -> None:
        log.info("nats %s: the cluster told of more servers to reconnect to", name)

    return {
        "name": name,
        "connect_timeout": int(max(1, connect_timeout)),
        "allow_reconnect": True,
        "max_reconnect_attempts": -1,
        "reconnect_time_wait": 1,
        "ping_interval": PING_INTERVAL_S,
        "max_outstanding_pings": MAX_OUTSTANDING_PINGS,
        "error_cb": on_error,
        "disconnected_cb": on_disconnected,
        "reconnected_cb": on_reconnected,
        "discovered_server_cb": on_discovered,
        **credentials.options(),
    }


async def connect(
    url: str, name: str, connect_timeout: float = 5.0, credentials: BusCredentials | None = None
) -> Client:
    """A NATS connection named ``name`` to one of the servers ``url`` lists (one URL, or a cluster's separated
    by commas: ``nrt.adapters.bus.servers``) that reconnects forever to any of them (see ``reconnecting``)."""
    options = reconnecting(url, name, connect_timeout, credentials)
    try:
        return await nats.connect(list(parse_servers(url)), **options)
    except Exception as exc:
        raise ConnectionError(f"cannot connect to NATS at {url}: {exc}") from exc


async def processed(connection: Client) -> None:
    """Return once the server has processed what ``connection`` sent before the call (a subscription, say).

    One ``flush`` is not that: nats-py writes its PING straight to the socket, ahead of the commands still
    queued for its flusher task (a SUB just made), so the PONG can come back before the server has the SUB.
    That flush wakes the flusher, which writes them before the PONG can come back; the second PING follows them.
    """
    await connection.flush()
    await connection.flush()
