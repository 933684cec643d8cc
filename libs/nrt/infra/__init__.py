"""Real NATS and PostgreSQL servers for tests and the one-command laptop stack (``nrt up``).

- :class:`EmbeddedNats` / :class:`EmbeddedPostgres`: private servers from wheels, 127.0.0.1 only.
- :class:`ContainerNats` / :class:`ContainerPostgres`: the same in Docker via testcontainers.
- :func:`nats_server` / :func:`postgres_server`: choose env URL, else Docker, else embedded.
"""

from __future__ import annotations

from nrt.infra.containers import ContainerNats, ContainerPostgres, docker_available
from nrt.infra.embedded_nats import EmbeddedNats, nats_server_binary, probe_jetstream, wait_for_jetstream
from nrt.infra.embedded_postgres import EmbeddedPostgres, postgres_bin_dir, service_account
from nrt.infra.errors import DataDirInUseError, InfraError, PortTimeoutError, ServerStartError
from nrt.infra.pgurl import ensure_database, to_libpq, to_sqlalchemy, with_database
from nrt.infra.ports import free_port, port_is_open, wait_for_port
from nrt.infra.servers import TEST_DATABASE_URL_ENV, TEST_NATS_URL_ENV, nats_server, postgres_server

__all__ = [
    "TEST_DATABASE_URL_ENV",
    "TEST_NATS_URL_ENV",
    "ContainerNats",
    "ContainerPostgres",
    "DataDirInUseError",
    "EmbeddedNats",
    "EmbeddedPostgres",
    "InfraError",
    "PortTimeoutError",
    "ServerStartError",
    "docker_available",
    "ensure_database",
    "free_port",
    "nats_server",
    "nats_server_binary",
    "port_is_open",
    "postgres_bin_dir",
    "postgres_server",
    "probe_jetstream",
    "service_account",
    "to_libpq",
    "to_sqlalchemy",
    "wait_for_jetstream",
    "wait_for_port",
    "with_database",
]
