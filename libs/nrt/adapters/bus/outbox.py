"""The events a process emitted and the stream has not acknowledged yet, in files of its own.

A service on the request path publishes its events without waiting for JetStream's
acknowledgement (``nrt.adapters.bus.emitter``). So that a crash cannot lose them, ``emit`` first
appends the event to this outbox: one ``write`` of its canonical JSON line, which the kernel
keeps even if the process is killed the next instant (it is not an fsync: a power cut can
lose the last events). Once the stream acknowledges an event it is settled here; a file
whose events are all settled is emptied and reused.

Each process writes its own files (``<service>-<pid>-<random>.<segment>.outbox`` under
``NRT_HOME/outbox``) and holds an exclusive ``flock`` on them while it runs. When a process of
a service starts, it adopts the files of that service that nobody holds (a predecessor that
crashed): their events are emitted again. An event id is its JetStream message id and the
log's idempotency key, so an event sent twice is stored once: delivery is at least once.
"""

from __future__ import annotations

import contextlib
import fcntl
import logging
import os
import uuid
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path

from nrt.core.events import AnyEvent, EventDecodeError, decode

log = logging.getLogger("nrt.adapters.bus.outbox")

SUFFIX = ".outbox"
SEGMENT_BYTES = 1 << 20  # a segment that reached this size is left for the other, once that one is settled


@dataclass
class _Segment:
    path: Path
    fd: int
    size: int = 0
    outstanding: set[str] = field(default_factory=set)  # event ids written here, not acknowledged yet


class Outbox:
    """Two segment files used in turn: events go to the active one; a full one is emptied once settled."""

    def __init__(self, directory: Path, service: str, segment_bytes: int = SEGMENT_BYTES) -> None:
        self.directory, self.service, self.segment_bytes = directory, service, segment_bytes
        directory.mkdir(parents=True, exist_ok=True)
        stem = f"{service}-{os.getpid()}-{uuid.uuid4().hex[:8]}"
        self._segments = [self._create(directory / f"{stem}.{n}{SUFFIX}") for n in (0, 1)]
        self._active = 0
        self._where: dict[str, int] = {}  # event id -> the segment it was written to

    @classmethod
    def open(cls, home: Path, service: str) -> Outbox:
        """The outbox of one process of ``service``, under ``home/outbox``."""
        return cls(home / "outbox", service)

    @staticmethod
    def _create(path: Path) -> _Segment:
        fd = os.open(path, os.O_RDWR | os.O_CREAT | os.O_APPEND, 0o600)
        fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)  # ours for as long as we run
        return _Segment(path=path, fd=fd)

    @property
    def outstanding(self) -> int:
        """Events kept and not settled yet."""
        return len(self._where)

    @property
    def paths(self) -> tuple[Path, ...]:
        """This process's files."""
        return tuple(s.path for s in self._segments)

    def add(self, event_id: str, data: bytes) -> None:
        """Keep an event (its id and canonical JSON) until it is settled: one append, before it is published."""
        if event_id in self._where:
            return  # emitted again before it was settled: kept once
        segment = self._segments[self._active]
        if segment.size >= self.segment_bytes:
            other = self._segments[1 - self._active]
            if not other.outstanding:  # switch only to a settled segment, emptied first
                os.ftruncate(other.fd, 0)
                other.size = 0
                self._active = 1 - self._active
                segment = other
        line = data + b"\n"  # canonical JSON has no newline of its own
        os.write(segment.fd, line)
        segment.size += len(line)
        segment.outstanding.add(event_id)
        self._where[event_id] = self._active

    def settle(self, event_id: str) -> None:
        """The stream stored the event: it need not be sent again."""
        index = self._where.pop(event_id, None)
        if index is None:
            return
        segment = self._segments[index]
        segment.outstanding.discard(event_id)
        if not segment.outstanding and segment.size >= self.segment_bytes and index != self._active:
            os.ftruncate(segment.fd, 0)
            segment.size = 0

    def adopt(self) -> Iterator[AnyEvent]:
        """The events of this service's outboxes that no running process holds (a crashed one's),
        in the order they were written; each adopted file is removed once read."""
        mine = {s.path for s in self._segments}
        for path in sorted(self.directory.glob(f"{self.service}-*{SUFFIX}"), key=_written_order):
            if path in mine:
                continue
            try:
                fd = os.open(path, os.O_RDONLY)
            except FileNotFoundError:
                continue  # another process adopted it first
            try:
                try:
                    fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
                except BlockingIOError:
                    continue  # a running process holds it
                with open(fd, "rb", closefd=False) as file:
                    lines = file.read().splitlines()
                for number, line in enumerate(lines, 1):
                    if not line:
                        continue
                    try:
                        yield decode(line)
                    except EventDecodeError as exc:  # a line cut short by the crash
                        log.warning("%s:%d: skipping an unreadable event: %s", path.name, number, exc)
                with contextlib.suppress(FileNotFoundError):
                    path.unlink()
            finally:
                os.close(fd)

    def close(self, *, remove: bool) -> None:
        """Release the files; ``remove`` them when every event was settled (else the next start adopts them)."""
        for segment in self._segments:
            if remove:
                with contextlib.suppress(FileNotFoundError):
                    segment.path.unlink()
            os.close(segment.fd)


def _written_order(path: Path) -> tuple[float, str]:
    try:
        return path.stat().st_mtime, path.name
    except FileNotFoundError:
        return 0.0, path.name
