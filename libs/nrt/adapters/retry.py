"""Trying an async call again after it fails, with exponential backoff: the one retry loop.

cluster_state's recorder and decision-outbox relay retry until their service stops; the remote
tier retries a connection a few times. Each caller says which failures are retried and what it
logs before each wait; the waits double from ``Backoff.first_s`` up to ``Backoff.max_s``, with no
jitter.
"""

from __future__ import annotations

import asyncio
import math
from collections.abc import Awaitable, Callable
from dataclasses import dataclass
from typing import TypeVar

T = TypeVar("T")

_MAX_DOUBLINGS = 64  # 2**64 times any first wait is past every max_s; it keeps the float finite


@dataclass(frozen=True, slots=True)
class Backoff:
    first_s: float  # the wait after the first failure
    max_s: float = math.inf  # no wait is longer

    def wait_s(self, failures: int) -> float:
        """The wait after ``failures`` failures in a row: ``first_s``, doubled after each later one, at most ``max_s``."""
        return min(self.first_s * 2.0 ** min(failures - 1, _MAX_DOUBLINGS), self.max_s)


class Stopped(Exception):
    """``stopping`` was set while :func:`retry` waited: it tries no more."""


# (the failure, the failures in a row so far, the wait before the next try); called while the
# failure is being handled, so ``log.exception`` logs its traceback
OnRetry = Callable[[Exception, int, float], None]


async def retry(
    call: Callable[[], Awaitable[T]],
    backoff: Backoff,
    on_retry: OnRetry,
    *,
    retry_on: tuple[type[Exception], ...] = (Exception,),
    attempts: int | None = None,
    stopping: asyncio.Event | None = None,
) -> T:
    """What ``call()`` returns, tried again after a ``retry_on`` failure once ``on_retry`` was told
    and the backoff's wait is over. Other exceptions end it at once; so does the last of
    ``attempts`` failures (None: no limit), re-raised; and ``stopping`` set during a wait (Stopped)."""
    failures = 0
    while True:
        try:
            return await call()
        except retry_on as exc:
            failures += 1
            if attempts is not None and failures >= attempts:
                raise
            wait = backoff.wait_s(failures)
            on_retry(exc, failures, wait)
            await asyncio.sleep(wait)
        if stopping is not None and stopping.is_set():
            raise Stopped
