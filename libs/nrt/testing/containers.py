"""NATS and PostgreSQL in Docker containers via testcontainers, when a Docker engine answers.

``testcontainers`` (and the ``docker`` SDK it brings) is a development dependency:
everything here imports it lazily, and :func:`docker_available` is False without it.
"""

from __future__ import annotations

import logging
import os
from pathlib import Path
from typing import TYPE_CHECKING, Any, Self

from nrt.adapters.infra import pgurl
from nrt.adapters.infra._server import ServerHandle
from nrt.adapters.infra.embedded_nats import wait_for_jetstream
from nrt.adapters.infra.errors import InfraError

if TYPE_CHECKING:
    pass

_log = logging.getLogger("nrt.adapters.infra")

DEFAULT_NATS_IMAGE = "nats:2.11-alpine"
DEFAULT_POSTGRES_IMAGE = "postgres:18-alpine"
_DEFAULT_SOCKETS = (Path("/var/run/docker.sock"), Path.home() / ".docker" / "run" / "docker.sock")


def docker_available(timeout: float = 1.0) -> bool:
    """True when a Docker engine answers a ping within ``timeout`` seconds.

    Looks where testcontainers looks (``~/.testcontainers.properties``, ``DOCKER_HOST``,
    the current Docker context). Returns False at once when testcontainers is not
    installed, or when no engine is configured and no default socket exists.
    """
    try:
        import docker  # type: ignore[import-untyped,unused-ignore]
        from testcontainers.core.docker_client import get_docker_host
    except ImportError:
        return False
    try:
        host = get_docker_host()
        if not host and not any(sock.exists() for sock in _DEFAULT_SOCKETS):
            return False
        environment = dict(os.environ)
        if host:
            environment["DOCKER_HOST"] = host
        client = docker.from_env(timeout=timeout, environment=environment)
        try:
            return bool(client.ping())
        finally:
            client.close()
    except Exception as exc:
        _log.debug("no Docker engine: %s", exc)
        return False


def unavailable_images(*images: str) -> str | None:
    """Why a container of ``images`` cannot start here (None: each is present, or was just pulled):
    testcontainers needs its Ryuk reaper image too, unless it is disabled. A Docker engine that
    answers may still reach no registry (an air-gapped host, CI here)."""
    import docker  # type: ignore[import-untyped,unused-ignore]
    from testcontainers.core.config import testcontainers_config

    wanted = [*images] + ([] if testcontainers_config.ryuk_disabled else [testcontainers_config.ryuk_image])
    client = docker.from_env()
    try:
        for image in wanted:
            try:
                client.images.get(image)
            except docker.errors.ImageNotFound:
                try:
                    client.images.pull(image)
                except docker.errors.APIError as exc:
                    return f"{image} is not here and cannot be pulled ({str(exc).splitlines()[0][:200]})"
    finally:
        client.close()
    return None


class _Container(ServerHandle):
    """Shared start/stop shape of the container wrappers."""

    def __init__(self) -> None:
        self._container: Any = None

    @property
    def running(self) -> bool:
        return self._container is not None

    def _require(self) -> Any:
        if self._container is None:
            raise InfraError(f"{type(self).__name__} is not running: call start() first")
        return self._container

    def stop(self) -> None:
        """Stop and remove the container. Idempotent."""
        container, self._container = self._container, None
        if container is not None:
            container.stop()


class ContainerNats(_Container):
    """nats-server with JetStream in a container; ``.url`` is ``nats://HOST:PORT``."""

    def __init__(self, image: str = DEFAULT_NATS_IMAGE, *, startup_timeout: float = 120.0) -> None:
        super().__init__()
        self.image = image
        self.startup_timeout = startup_timeout
        self._url: str | None = None

    def start(self) -> Self:
        if self._container is not None:
            return self
        from testcontainers.community.nats import NatsContainer

        container = NatsContainer(self.image, jetstream=True, ready_timeout_secs=int(self.startup_timeout))
        container.start()
        try:
            host, port = container.nats_host_and_port()
            wait_for_jetstream(host, int(port), self.startup_timeout)
        except BaseException:
            container.stop()
            raise
        self._container = container
        self._url = f"nats://{host}:{port}"
        return self

    @property
    def url(self) -> str:
        self._require()
        assert self._url is not None
        return self._url


class ContainerPostgres(_Container):
    """PostgreSQL in a container; ``.url`` is the SQLAlchemy (psycopg) URL, ``.dsn`` the libpq one."""

    def __init__(
        self,
        image: str = DEFAULT_POSTGRES_IMAGE,
        *,
        user: str = "postgres",
        password: str = "postgres",
        database: str = "postgres",
    ) -> None:
        super().__init__()
        self.image = image
        self.user = user
        self.password = password
        self.database = database

    def start(self) -> Self:
        if self._container is not None:
            return self
        from testcontainers.community.postgres import PostgresContainer

        container = PostgresContainer(
            self.image, username=self.user, password=self.password, dbname=self.database, driver="psycopg"
        )
        container.start()
        self._container = container
        return self

    @property
    def url(self) -> str:
        return str(self._require().get_connection_url())

    @property
    def dsn(self) -> str:
        return pgurl.to_libpq(self.url)

    def ensure_database(self, name: str) -> str:
        """Create database ``name`` unless it exists; return its SQLAlchemy URL."""
        return pgurl.ensure_database(self.url, name)
