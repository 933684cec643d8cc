"""The NATS servers a process connects to: one URL, or a cluster's servers as a comma-separated list.

``NRT_NATS_URL=nats://n1:4222,nats://n2:4222,nats://n3:4222`` gives a client every server of a cluster: it
connects to one of them (nats-py shuffles the list), and when that one goes away it reconnects to another,
whether or not the server it first reached had told it about the others.
"""

from __future__ import annotations

from urllib.parse import urlsplit

SCHEMES = ("nats", "tls")


class NatsUrlError(ValueError):
    """A NATS URL list that a client cannot connect with; the message says which entry and why."""


def parse_servers(value: str) -> tuple[str, ...]:
    """The server URLs of ``value`` (one URL, or several separated by commas), each stripped of blanks.

    Each must be ``nats://`` or ``tls://`` with a host (a port is optional: 4222) and nothing after the
    port; the list may not repeat a server nor hold an empty entry."""
    entries = [entry.strip() for entry in value.split(",")]
    if not any(entries):
        raise NatsUrlError("no NATS server given: expected a URL such as nats://127.0.0.1:4222")
    servers: list[str] = []
    seen: set[str] = set()
    for position, entry in enumerate(entries, start=1):
        where = f"entry {position} of {len(entries)}" if len(entries) > 1 else "the URL"
        if not entry:
            raise NatsUrlError(f"{where} is empty: separate the servers' URLs by single commas")
        _check(entry, where)
        address = _address(entry)
        if address in seen:
            raise NatsUrlError(f"{where} ({entry}) repeats a server already in the list")
        seen.add(address)
        servers.append(entry)
    return tuple(servers)


def _check(entry: str, where: str) -> None:
    try:
        parts = urlsplit(entry)
        port = parts.port  # raises ValueError when it is not a number in 0-65535
    except ValueError as exc:
        raise NatsUrlError(f"{where} ({entry}) is not a valid URL: {exc}") from None
    if parts.scheme not in SCHEMES:
        found = f"'{parts.scheme}://'" if "://" in entry else "no scheme"
        raise NatsUrlError(
            f"{where} ({entry}) has {found}: expected {' or '.join(f'{s}://' for s in SCHEMES)}, as in "
            "nats://127.0.0.1:4222"
        )
    if not parts.hostname:
        raise NatsUrlError(f"{where} ({entry}) names no host: expected nats://HOST[:PORT]")
    if port == 0:
        raise NatsUrlError(f"{where} ({entry}) has port 0: expected the port the server listens on (4222)")
    if parts.path not in ("", "/") or parts.query or parts.fragment:
        raise NatsUrlError(f"{where} ({entry}) has something after its port: expected nats://HOST[:PORT]")


def _address(entry: str) -> str:
    parts = urlsplit(entry)
    return f"{(parts.hostname or '').lower()}:{parts.port or 4222}"
