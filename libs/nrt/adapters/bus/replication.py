"""How many copies JetStream keeps of what NRT stores on the bus (the events stream, key-value buckets,
object stores): ``NRT_NATS_REPLICAS`` when set, else by the size of the NATS cluster.

The size is what the connection knows: the servers the process was given (``NRT_NATS_URL``'s list) and
those the cluster told it of (a clustered server advertises every member's client URL, ``connect_urls``,
which nats-py adds to its pool to reconnect to), counted once each by host and port. A standalone server
advertises none: one, unless the process was given several. Three or more servers keep three copies (a
write needs two: one server may go); fewer keep one (two copies would need both servers for every write).
Where one server is named in two ways (``localhost`` and ``127.0.0.1``) the count is too high: set
``NRT_NATS_REPLICAS``.
"""

from __future__ import annotations

from collections.abc import Iterable
from urllib.parse import ParseResult

from nats.aio.client import Client

REPLICATED = 3  # copies on a cluster of 3 or more: one server may be lost, a quorum (2) stays


def cluster_size(servers: Iterable[ParseResult]) -> int:
    """How many distinct servers (host and port) a client's server pool holds."""
    return max(1, len({(server.hostname or "", server.port or 4222) for server in servers}))


def default_replicas(size: int) -> int:
    """The copies to keep on a cluster of ``size`` servers when none are configured."""
    return REPLICATED if size >= REPLICATED else 1


def replicas_for(nc: Client, configured: int | None) -> int:
    """``configured`` (``NRT_NATS_REPLICAS``), else the default for the cluster ``nc`` is connected to."""
    if configured is not None:
        return configured
    return default_replicas(cluster_size(nc.servers))
