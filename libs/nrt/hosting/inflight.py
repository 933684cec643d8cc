"""The generate requests running on this worker, by request id, so that a cancel can stop one.

A cancel (``nrt.requests.cancel``, sent by the gateway when its client has gone) cancels the
task that streams the answer; the engine's generator then marks its row cancelled and the
batch drops it before its next decode step.
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Iterator
from contextlib import contextmanager

log = logging.getLogger("nrt.worker")


class InFlight:
    def __init__(self) -> None:
        self._tasks: dict[str, asyncio.Task[object]] = {}

    def __len__(self) -> int:
        return len(self._tasks)

    @contextmanager
    def running(self, request_id: str) -> Iterator[None]:
        """Register the current task as the one answering ``request_id`` while the block runs."""
        task = asyncio.current_task()
        if task is None:  # not in a task: nothing to cancel
            yield
            return
        self._tasks[request_id] = task
        try:
            yield
        finally:
            if self._tasks.get(request_id) is task:
                del self._tasks[request_id]

    def cancel(self, request_id: str, reason: str) -> bool:
        """Stop answering ``request_id``; False when it does not run here."""
        task = self._tasks.pop(request_id, None)
        if task is None:
            return False
        log.info("cancelling request %s (%s)", request_id, reason)
        task.cancel()
        return True
