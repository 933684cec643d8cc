"""Real NATS and PostgreSQL servers for tests and the one-command laptop stack (``nrt up``).

- :class:`EmbeddedNats` / :class:`EmbeddedPostgres`: private servers from wheels, 127.0.0.1 only;
  :class:`EmbeddedNatsCluster`: N embedded nats-servers routed into one cluster.

The same servers in Docker (testcontainers) and the choice between an env URL, Docker and an
embedded server are test support: ``nrt.testing.containers`` and ``nrt.testing.servers``.
"""

from __future__ import annotations

from nrt.adapters.infra.embedded_nats import EmbeddedNats, nats_server_binary, probe_jetstream, wait_for_jetstream
from nrt.adapters.infra.embedded_nats_cluster import EmbeddedNatsCluster
from nrt.adapters.infra.embedded_postgres import EmbeddedPostgres, postgres_bin_dir, service_account
from nrt.adapters.infra.errors import DataDirInUseError, InfraError, PortTimeoutError, ServerStartError
from nrt.adapters.infra.pgurl import ensure_database, to_libpq, to_sqlalchemy, with_database
from nrt.adapters.infra.ports import free_port, port_is_open, wait_for_port

__all__ = [
    "DataDirInUseError",
    "EmbeddedNats",
    "EmbeddedNatsCluster",
    "EmbeddedPostgres",
    "InfraError",
    "PortTimeoutError",
    "ServerStartError",
    "ensure_database",
    "free_port",
    "nats_server_binary",
    "port_is_open",
    "postgres_bin_dir",
    "probe_jetstream",
    "service_account",
    "to_libpq",
    "to_sqlalchemy",
    "wait_for_jetstream",
    "wait_for_port",
    "with_database",
]
