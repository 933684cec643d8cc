"""Pick a NATS / PostgreSQL server: a URL from the environment, else a container, else embedded.

Tests use the defaults (``NRT_TEST_NATS_URL`` / ``NRT_TEST_DATABASE_URL``); ``nrt up``
passes ``env_var="NRT_NATS_URL"`` / ``"NRT_DATABASE_URL"`` and ``use_docker=False``
so that its data stays in its data directory across runs.
"""

from __future__ import annotations

import logging
import os
from contextlib import contextmanager
from pathlib import Path
from typing import TYPE_CHECKING

from nrt.adapters.infra import pgurl
from nrt.adapters.infra.embedded_nats import EmbeddedNats
from nrt.adapters.infra.embedded_postgres import EmbeddedPostgres
from nrt.testing.containers import ContainerNats, ContainerPostgres, docker_available

if TYPE_CHECKING:
    from collections.abc import Iterator

_log = logging.getLogger("nrt.adapters.infra")

TEST_NATS_URL_ENV = "NRT_TEST_NATS_URL"
TEST_DATABASE_URL_ENV = "NRT_TEST_DATABASE_URL"


def _from_env(env_var: str | None) -> str | None:
    if not env_var:
        return None
    return os.environ.get(env_var, "").strip() or None


@contextmanager
def nats_server(
    data_dir: str | os.PathLike[str] | None = None,
    *,
    env_var: str | None = TEST_NATS_URL_ENV,
    use_docker: bool = True,
    docker_timeout: float = 1.0,
    config_file: Path | None = None,
) -> Iterator[str]:
    """Yield the URL of a NATS server with JetStream, stopping it afterwards if we started it.

    ``config_file`` (users and permissions: ``nrt.adapters.bus.auth``) applies to an embedded server only.

    In order: ``$env_var`` when set (used as is, nothing started); a container when
    ``use_docker`` and a Docker engine answers within ``docker_timeout`` (falls back
    to embedded if the container cannot start); else :class:`EmbeddedNats` in
    ``data_dir`` (a temporary directory when None).
    """
    url = _from_env(env_var)
    if url is not None:
        _log.info("NATS from $%s: %s", env_var, url)
        yield url
        return
    if use_docker and config_file is None and docker_available(docker_timeout):
        container = ContainerNats()
        try:
            container.start()
        except Exception as exc:
            _log.warning("NATS container did not start (%s); using embedded nats-server", exc)
        else:
            try:
                _log.info("NATS in a container: %s", container.url)
                yield container.url
            finally:
                container.stop()
            return
    with EmbeddedNats(data_dir, config_file=config_file) as nats:
        yield nats.url


@contextmanager
def postgres_server(
    data_dir: str | os.PathLike[str] | None = None,
    *,
    env_var: str | None = TEST_DATABASE_URL_ENV,
    database: str | None = None,
    use_docker: bool = True,
    docker_timeout: float = 1.0,
    durable: bool = True,
) -> Iterator[str]:
    """Yield the SQLAlchemy URL (``postgresql+psycopg://``) of a PostgreSQL server.

    Same order as :func:`nats_server`. A URL from ``$env_var`` is normalised to the
    psycopg driver but otherwise used as is, its database included: it names the
    database someone chose, and ``database`` does not replace it. With ``database``, a
    server started here (container or embedded) gets that database, created if
    missing, and the URL points at it; otherwise it points at the server's default
    database. ``durable=False`` turns fsync off in an embedded server (tests only).
    """
    url = _from_env(env_var)
    if url is not None:
        _log.info("PostgreSQL from $%s", env_var)
        yield pgurl.to_sqlalchemy(url)
        return
    if use_docker and docker_available(docker_timeout):
        container = ContainerPostgres()
        try:
            container.start()
        except Exception as exc:
            _log.warning("PostgreSQL container did not start (%s); using embedded PostgreSQL", exc)
        else:
            try:
                yield container.ensure_database(database) if database else container.url
            finally:
                container.stop()
            return
    with EmbeddedPostgres(data_dir, durable=durable) as pg:
        yield pg.ensure_database(database) if database else pg.url
