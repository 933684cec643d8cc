"""``nrt.adapters.retry``: the backoff loop the recorder, the outbox relay and the remote tier share (no sleeping: the waits are recorded)."""

from __future__ import annotations

import asyncio
import logging

import pytest

from nrt.adapters import retry as retry_module
from nrt.adapters.retry import Backoff, Stopped, retry


@pytest.fixture
def waits(monkeypatch: pytest.MonkeyPatch) -> list[float]:
    """The waits ``retry`` asks for, in order (each returns at once)."""
    asked: list[float] = []

    async def sleep(seconds: float) -> None:
        asked.append(seconds)

    monkeypatch.setattr(retry_module.asyncio, "sleep", sleep)
    return asked


class Flaky:
    """Fails ``times`` times with ``error``, then returns how many calls it took."""

    def __init__(self, times: int, error: Exception | None = None) -> None:
        self.left = times
        self.calls = 0
        self.error = error or OSError("down")

    async def __call__(self) -> int:
        self.calls += 1
        if self.left:
            self.left -= 1
            raise self.error
        return self.calls


def test_the_waits_double_from_the_first_up_to_the_max() -> None:
    backoff = Backoff(first_s=0.5, max_s=10.0)
    assert [backoff.wait_s(n) for n in range(1, 8)] == [0.5, 1.0, 2.0, 4.0, 8.0, 10.0, 10.0]
    assert Backoff(first_s=0.25).wait_s(3) == 1.0  # no max: doubled each time
    assert backoff.wait_s(5_000) == 10.0  # hours of failures: still the max, no overflow


async def test_it_retries_until_the_call_succeeds_telling_each_retry(waits: list[float]) -> None:
    told: list[tuple[str, int, float]] = []
    result = await retry(
        Flaky(3), Backoff(first_s=0.5, max_s=1.0), lambda exc, n, wait: told.append((str(exc), n, wait))
    )
    assert result == 4
    assert told == [("down", 1, 0.5), ("down", 2, 1.0), ("down", 3, 1.0)]
    assert waits == [0.5, 1.0, 1.0]


async def test_the_last_allowed_attempt_reraises_its_failure(waits: list[float]) -> None:
    call = Flaky(5, ConnectionError("refused"))
    with pytest.raises(ConnectionError, match="refused"):
        await retry(call, Backoff(first_s=0.25), lambda *_: None, retry_on=(ConnectionError,), attempts=3)
    assert call.calls == 3
    assert waits == [0.25, 0.5]  # no wait after the last attempt


async def test_a_failure_not_retried_ends_it_at_once(waits: list[float]) -> None:
    call = Flaky(1, ValueError("bad request"))
    with pytest.raises(ValueError, match="bad request"):
        await retry(call, Backoff(first_s=0.25), lambda *_: None, retry_on=(ConnectionError,), attempts=3)
    assert (call.calls, waits) == (1, [])


async def test_stopping_set_during_a_wait_ends_it_without_another_try(monkeypatch: pytest.MonkeyPatch) -> None:
    stopping = asyncio.Event()

    async def sleep(_seconds: float) -> None:
        stopping.set()  # the service is told to stop while the loop waits

    monkeypatch.setattr(retry_module.asyncio, "sleep", sleep)
    call = Flaky(10)
    with pytest.raises(Stopped):
        await retry(call, Backoff(first_s=0.5), lambda *_: None, stopping=stopping)
    assert call.calls == 1


async def test_each_retry_is_logged_with_the_failure_s_traceback(
    waits: list[float], caplog: pytest.LogCaptureFixture
) -> None:
    log = logging.getLogger("nrt.test.retry")

    def logged(_exc: Exception, _n: int, wait: float) -> None:
        log.exception("publishing failed; retrying in %.1fs", wait)

    with caplog.at_level(logging.ERROR, logger="nrt.test.retry"):
        await retry(Flaky(1), Backoff(first_s=0.5), logged)
    assert [r.getMessage() for r in caplog.records] == ["publishing failed; retrying in 0.5s"]
    assert caplog.records[0].exc_info is not None
    assert isinstance(caplog.records[0].exc_info[1], OSError)
