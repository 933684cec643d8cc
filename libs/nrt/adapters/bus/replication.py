"""How many copies JetStream keeps of what NRT stores on the bus (the events stream, key-value buckets,
object stores): ``NRT_NATS_REPLICAS`` when set, else by the size of the NATS cluster.

The size is what the connection knows: the servers the process was given (``NRT_NATS_URL``'s list), or
the servers the cluster advertises (a clustered server lists every member's client URL, itself included,
in its INFO: ``connect_urls``), whichever is more. A standalone server advertises none: the list given
counts. Three or more servers keep three copies (a write needs two: one server may go); fewer keep one
(two copies would need both servers for every write). A process that connects right after the cluster
formed may see fewer servers advertised than there are: give it the whole list, or set ``NRT_NATS_REPLICAS``.
Other stores NRT creates take the same count: ``KeyValueConfig(replicas=replicas_for(nc, configured))``.
"""

from __future__ import annotations

from collections.abc import Collection, Iterable
from urllib.parse import ParseResult

from nats.aio.client import Client

REPLICATED = 3  # copies on a cluster of 3 or more: one server may be lost, a quorum (2) stays


def cluster_size(given: Iterable[ParseResult], advertised: Collection[str] = ()) -> int:
    """How many servers the cluster has: the distinct servers (host and port) a process was given, or the
    client URLs its server advertises, whichever is more."""
    distinct = {(server.hostname or "", server.port or 4222) for server in given}
    return max(1, len(distinct), len(set(advertised)))


def default_replicas(size: int) -> int:
    """The copies to keep on a cluster of ``size`` servers when none are configured."""
    return REPLICATED if size >= REPLICATED else 1


def advertised_servers(nc: Client) -> list[str]:
    """The client URLs the server ``nc`` is connected to advertises (``host:port``, itself included; none for a
    standalone server). nats-py keeps the server's INFO only in a private attribute: read it defensively."""
    info = getattr(nc, "_server_info", None)
    urls = info.get("connect_urls") if isinstance(info, dict) else None
    return [url for url in urls if isinstance(url, str)] if isinstance(urls, list) else []


def replicas_for(nc: Client, configured: int | None) -> int:
    """``configured`` (``NRT_NATS_REPLICAS``), else the default for the cluster ``nc`` is connected to."""
    if configured is not None:
        return configured
    discovered = {(s.hostname, s.port) for s in nc.discovered_servers}
    given = [s for s in nc.servers if (s.hostname, s.port) not in discovered]
    return default_replicas(cluster_size(given, advertised_servers(nc)))
