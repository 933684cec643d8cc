"""Supervised child processes: started in order, restarted when they crash, stopped in reverse.

Each child runs in a session of its own (a Ctrl-C reaches only the supervisor, which stops them
in order) and is killed by the kernel when the supervisor dies, however it dies: a killed
supervisor leaves no service running under pid 1. Children are started from the event loop's
thread, which lives as long as the supervisor.
"""

from __future__ import annotations

import asyncio
import logging
import os
import signal
import sys
import time
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field

from nrt.adapters.infra._process import dies_with_parent

log = logging.getLogger("nrt.entrypoints.stack")

Report = Callable[[str], None]


@dataclass(frozen=True, slots=True)
class ChildSpec:
    name: str
    argv: Sequence[str]
    env: Mapping[str, str] = field(default_factory=dict)
    stop_timeout: float = 15.0


@dataclass(slots=True)
class _Child:
    spec: ChildSpec
    process: asyncio.subprocess.Process | None = None
    restarts: int = 0
    task: asyncio.Task[None] | None = None


class Supervisor:
    """Keeps each child running; a crashed child is restarted (with backoff) and reported."""

    def __init__(self, report: Report, log_dir: str | None = None, max_backoff: float = 10.0) -> None:
        self.report = report
        self.log_dir = log_dir
        self.max_backoff = max_backoff
        self._children: list[_Child] = []
        self._stopping = False

    def python_module(self, name: str, module: str, env: Mapping[str, str], args: Sequence[str] = ()) -> ChildSpec:
        return ChildSpec(name=name, argv=(sys.executable, "-m", module, *args), env=env)

    async def start(self, spec: ChildSpec) -> None:
        child = _Child(spec)
        self._children.append(child)
        await self._spawn(child)
        child.task = asyncio.create_task(self._watch(child))

    async def _spawn(self, child: _Child) -> None:
        env = {**os.environ, **child.spec.env}
        stdout: int | None = None
        if self.log_dir:
            os.makedirs(self.log_dir, exist_ok=True)
            stdout = os.open(
                os.path.join(self.log_dir, f"{child.spec.name}.log"), os.O_WRONLY | os.O_CREAT | os.O_APPEND, 0o644
            )
        try:
            child.process = await asyncio.create_subprocess_exec(
                *child.spec.argv,
                env=env,
                stdout=stdout,
                stderr=stdout,
                start_new_session=True,
                preexec_fn=dies_with_parent(signal.SIGKILL),
            )
        finally:
            if stdout is not None:
                os.close(stdout)

    async def _watch(self, child: _Child) -> None:
        while True:
            assert child.process is not None
            started = time.monotonic()
            code = await child.process.wait()
            if self._stopping:
                return
            child.restarts += 1
            backoff = min(self.max_backoff, 0.5 * 2 ** min(child.restarts, 5))
            if time.monotonic() - started > 60:
                backoff = 0.5  # it ran fine for a while: restart at once
            self.report(
                f"{child.spec.name} exited with {code}; restarting in {backoff:.1f}s (restart #{child.restarts})"
            )
            await asyncio.sleep(backoff)
            if self.stopping():
                return
            await self._spawn(child)

    def stopping(self) -> bool:
        return self._stopping

    def pids(self) -> dict[str, int]:
        return {c.spec.name: c.process.pid for c in self._children if c.process is not None}

    async def stop(self) -> None:
        """SIGTERM each child, newest first, waiting for it; SIGKILL what outlives its timeout."""
        self._stopping = True
        for child in reversed(self._children):
            if child.task is not None:
                child.task.cancel()
            process = child.process
            if process is None or process.returncode is not None:
                continue
            process.send_signal(signal.SIGTERM)
            try:
                await asyncio.wait_for(process.wait(), child.spec.stop_timeout)
                self.report(f"{child.spec.name} stopped")
            except TimeoutError:
                self.report(f"{child.spec.name} did not stop within {child.spec.stop_timeout:g}s; killing it")
                os.killpg(process.pid, signal.SIGKILL)
                await process.wait()
