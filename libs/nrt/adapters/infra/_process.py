"""Child-process plumbing shared by the embedded servers: spawn, log tails, clean stop."""

from __future__ import annotations

import contextlib
import ctypes
import logging
import os
import signal
import subprocess
import sys
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import IO, TYPE_CHECKING, TypedDict

import psutil  # type: ignore[import-untyped,unused-ignore]

if TYPE_CHECKING:
    from collections.abc import Mapping, Sequence

_log = logging.getLogger("nrt.adapters.infra")


@dataclass(frozen=True, slots=True)
class Identity:
    """An unprivileged system account a child process runs as (used when we are root)."""

    name: str
    uid: int
    gid: int


@dataclass(frozen=True, slots=True)
class StopStep:
    """Send ``sig`` and wait up to ``timeout`` seconds for the process to exit."""

    sig: signal.Signals
    timeout: float


_PR_SET_PDEATHSIG = 1  # <linux/prctl.h>


def dies_with_parent(sig: signal.Signals) -> Callable[[], None] | None:
    """A ``preexec_fn`` after which the kernel sends ``sig`` to the child when this process dies
    (``PR_SET_PDEATHSIG``, kept across ``exec``: for any program, not only Python); None off Linux.

    A child in a session of its own gets no signal from a terminal, and a parent killed with
    SIGKILL stops nothing: without this its children would keep running under pid 1. The kernel
    sends ``sig`` when the *thread* that started the child ends, so start children from a thread
    that lives as long as they should (the main thread, or an executor's). It is set after
    ``subprocess`` switches the child's user (a switch would clear it); a parent that died
    before it was set is noticed, and the child exits at once.
    """
    if sys.platform != "linux":
        return None
    prctl = ctypes.CDLL(None, use_errno=True).prctl  # looked up here: the child only calls it
    parent = os.getpid()

    def arm() -> None:
        prctl(_PR_SET_PDEATHSIG, int(sig), 0, 0, 0)
        if os.getppid() != parent:  # orphaned already, before the signal was armed
            os._exit(1)

    return arm


class ServerProcess:
    """A long-running server child with its log file.

    The child runs in its own session, so a Ctrl-C in the terminal reaches only
    us and we decide the shutdown order; it gets ``parent_death`` when we die
    (:func:`dies_with_parent`), so it never outlives us. Output goes to ``log_path``
    (appended); :meth:`log_tail` returns what this run wrote.
    """

    def __init__(
        self,
        args: Sequence[str],
        *,
        log_path: Path,
        cwd: Path,
        env: Mapping[str, str] | None = None,
        identity: Identity | None = None,
        pass_fds: Sequence[int] = (),
        parent_death: signal.Signals = signal.SIGKILL,
    ) -> None:
        self.args = list(args)
        self.log_path = log_path
        log_path.parent.mkdir(parents=True, exist_ok=True)
        self._log: IO[bytes] = open(log_path, "ab")  # noqa: SIM115 - closed in stop()
        self._log_offset = self._log.tell()
        try:
            self.proc: subprocess.Popen[bytes] = subprocess.Popen(
                self.args,
                stdin=subprocess.DEVNULL,
                stdout=self._log,
                stderr=subprocess.STDOUT,
                cwd=cwd,
                env=dict(env) if env is not None else None,
                start_new_session=True,
                pass_fds=tuple(pass_fds),
                preexec_fn=dies_with_parent(parent_death),
                **identity_kwargs(identity),
            )
        except BaseException:
            self._log.close()
            raise

    @property
    def pid(self) -> int:
        return self.proc.pid

    def exited(self) -> int | None:
        """The exit code when the process has ended, else None."""
        return self.proc.poll()

    def log_tail(self, lines: int = 40) -> str:
        """The last ``lines`` lines this run wrote to its log."""
        try:
            with open(self.log_path, "rb") as fh:
                fh.seek(self._log_offset)
                text = fh.read().decode("utf-8", errors="replace")
        except OSError as exc:
            return f"<could not read {self.log_path}: {exc}>"
        return "\n".join(text.splitlines()[-lines:])

    def stop(self, steps: Sequence[StopStep]) -> None:
        """Stop the server and every process it started; leave nothing behind.

        Each step sends a signal and waits; if the server is still alive after the
        last step it is SIGKILLed. Descendants (e.g. PostgreSQL backends) that
        outlive their parent are killed too.
        """
        try:
            descendants = psutil.Process(self.proc.pid).children(recursive=True)
        except psutil.Error:
            descendants = []
        try:
            for step in steps:
                if self.proc.poll() is not None:
                    break
                try:
                    self.proc.send_signal(step.sig)
                    self.proc.wait(step.timeout)
                except subprocess.TimeoutExpired:
                    _log.warning(
                        "%s (pid %d) still running %.0fs after %s; escalating",
                        Path(self.args[0]).name,
                        self.proc.pid,
                        step.timeout,
                        step.sig.name,
                    )
                except ProcessLookupError:
                    break
            if self.proc.poll() is None:
                self.proc.kill()
                self.proc.wait(10)
            _, alive = psutil.wait_procs(descendants, timeout=5)
            for child in alive:
                with contextlib.suppress(psutil.Error):
                    child.kill()
            psutil.wait_procs(alive, timeout=5)
        finally:
            self._log.close()


class DropPrivileges(TypedDict, total=False):
    """Keyword arguments of :class:`subprocess.Popen` that switch the child to another account."""

    user: int
    group: int
    extra_groups: list[int]
    umask: int


def identity_kwargs(identity: Identity | None) -> DropPrivileges:
    """``subprocess`` keyword arguments that drop root privileges to ``identity``."""
    if identity is None:
        return {}
    return {"user": identity.uid, "group": identity.gid, "extra_groups": [], "umask": 0o077}


def pid_runs(pid: int, name: str) -> bool:
    """True when ``pid`` is a live (non-zombie) process whose executable name is ``name``."""
    try:
        proc = psutil.Process(pid)
        return bool(proc.status() != psutil.STATUS_ZOMBIE and proc.name() == name)
    except psutil.Error:
        return False


def child_env(drop_prefixes: Sequence[str] = ()) -> dict[str, str]:
    """This process's environment without variables that would redirect a server."""
    return {k: v for k, v in os.environ.items() if not k.startswith(tuple(drop_prefixes))}


__all__ = [
    "DropPrivileges",
    "Identity",
    "ServerProcess",
    "StopStep",
    "child_env",
    "dies_with_parent",
    "identity_kwargs",
    "pid_runs",
]
