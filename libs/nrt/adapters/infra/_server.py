"""The shape every server handle shares: start / stop and a context manager around them,
and, for the embedded ones, a data directory of their own and a child process on 127.0.0.1."""

from __future__ import annotations

import os
import shutil
from pathlib import Path
from typing import TYPE_CHECKING, Self

from nrt.adapters.infra._process import ServerProcess
from nrt.adapters.infra.errors import InfraError
from nrt.adapters.infra.ports import LOOPBACK

if TYPE_CHECKING:
    from types import TracebackType


class ServerHandle:
    """``with handle:`` starts it and stops it on the way out."""

    def start(self) -> Self:
        raise NotImplementedError

    def stop(self) -> None:
        raise NotImplementedError

    def __enter__(self) -> Self:
        return self.start()

    def __exit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        self.stop()


class EmbeddedServer(ServerHandle):
    """A private server child listening on 127.0.0.1, with its own data directory.

    ``data_dir=None`` makes a temporary directory at start, removed on stop. Subclasses
    launch the child (``_server``, ``_port``) and name their ``address``.
    """

    def __init__(
        self,
        data_dir: str | os.PathLike[str] | None,
        *,
        port: int | None,
        startup_timeout: float,
        stop_timeout: float,
    ) -> None:
        self._temporary = data_dir is None
        self.data_dir = Path(data_dir).absolute() if data_dir is not None else None
        self._requested_port = port
        self.startup_timeout = startup_timeout
        self.stop_timeout = stop_timeout
        self.startup_s: float | None = None
        """Seconds the last :meth:`start` took until the server answered."""
        self._port: int | None = None
        self._server: ServerProcess | None = None

    @property
    def host(self) -> str:
        return LOOPBACK

    @property
    def port(self) -> int:
        if self._port is None or self._server is None:
            raise InfraError(f"{type(self).__name__} is not running: call start() first")
        return self._port

    @property
    def address(self) -> str:
        """How a client reaches the running server (for messages and ``repr``)."""
        raise NotImplementedError

    def pin_port(self) -> None:
        """Later starts listen on the port this running server listens on (a restart keeps its address)."""
        self._requested_port = self.port

    @property
    def pid(self) -> int | None:
        return self._server.pid if self._server is not None else None

    @property
    def running(self) -> bool:
        return self._server is not None and self._server.exited() is None

    def _dir(self) -> Path:
        if self.data_dir is None:
            raise InfraError(f"{type(self).__name__} has no data directory yet: call start() first")
        return self.data_dir

    def _remove_if_temporary(self) -> None:
        if self._temporary and self.data_dir is not None:
            shutil.rmtree(self.data_dir, ignore_errors=True)
            self.data_dir = None

    def __repr__(self) -> str:
        where = self.address if self.running else "stopped"
        return f"{type(self).__name__}({where}, data_dir={self.data_dir})"
