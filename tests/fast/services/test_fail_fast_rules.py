"""The pure rules of failing fast: the inter-token deadline, the recent decode speed, Retry-After,
and which in-flight requests a lost worker, or a dropped NATS connection, ends."""

from __future__ import annotations

import asyncio

import msgspec
import pytest

from api_gateway.deadlines import inter_token_timeout, next_frame_timeout
from api_gateway.errors import ApiError, retry_after_header
from api_gateway.reply_stream import BUS_LOST, WORKER_LOST, Frame, Inboxes, WorkerLost
from api_gateway.settings import GatewaySettings
from api_gateway.worker_reconnects import ReconnectCounts, read_beat
from nrt.adapters.bus.errors import Overloaded, RemoteError
from nrt.core.protocol import WorkerHeartbeat
from nrt.hosting.model_host import recent_speed

SETTINGS = GatewaySettings(
    idle_timeout=60.0, token_timeout_factor=50.0, token_timeout_floor=5.0, first_token_timeout=30.0
)


@pytest.mark.parametrize(
    ("tokens_per_s", "expected"),
    [
        (None, 60.0),  # not measured yet: the idle timeout
        (0.0, 60.0),
        (1000.0, 5.0),  # a fast model: the floor
        (5.0, 10.0),  # 50 token times
        (0.5, 60.0),  # a very slow one: never more than the idle timeout
    ],
)
def test_the_inter_token_deadline_follows_the_measured_speed_within_bounds(
    tokens_per_s: float | None, expected: float
) -> None:
    assert inter_token_timeout(tokens_per_s, SETTINGS) == pytest.approx(expected)


def test_each_wait_has_its_own_allowance() -> None:
    assert next_frame_timeout(SETTINGS, accepted=False, chunks=0, tokens_per_s=None) == (30.0, "first reply")
    assert next_frame_timeout(SETTINGS, accepted=True, chunks=0, tokens_per_s=100.0) == (30.0, "first token")
    assert next_frame_timeout(SETTINGS, accepted=True, chunks=3, tokens_per_s=5.0) == (10.0, "next token")


def test_the_recent_speed_is_a_moving_average() -> None:
    assert recent_speed(None, 100.0) == 100.0
    assert recent_speed(100.0, 200.0) == pytest.approx(130.0)


def test_retry_after_is_whole_seconds_and_reaches_the_http_answer() -> None:
    assert retry_after_header(0.2) == "1"
    assert retry_after_header(2.5) == "3"
    error = ApiError.from_remote(Overloaded("the queue is full"))
    assert (error.status, error.code, error.headers["Retry-After"]) == (429, "overloaded", "1")
    assert "Retry-After" not in ApiError.from_remote(RemoteError("bad", "no", 400)).headers


class _NoNats:
    def new_inbox(self) -> str:
        return "_INBOX.test"


def assert_ended(queue: asyncio.Queue[Frame], code: str, retry_after: float, says: str) -> None:
    """The gateway put a 503 ``code`` error, saying ``says``, on the request's queue."""
    error = queue.get_nowait()
    assert isinstance(error, RemoteError)
    assert (error.code, error.status, error.retry_after) == (code, 503, retry_after)
    assert says in error.message


async def test_a_lost_worker_ends_its_requests_and_the_untaken_ones_sent_before() -> None:
    inboxes = Inboxes(_NoNats())  # type: ignore[arg-type]
    on_lost, queue_lost = inboxes.open()
    on_other, queue_other = inboxes.open()
    untaken, queue_untaken = inboxes.open()
    inboxes.taken(on_lost, "w1")
    inboxes.taken(on_other, "w2")
    await asyncio.sleep(0.3)  # older than the grace for a request no worker took yet
    fresh, queue_fresh = inboxes.open()
    assert inboxes.worker_lost("w1", "heartbeat_timeout") == 2
    for queue in (queue_lost, queue_untaken):
        assert_ended(queue, WORKER_LOST, 2.0, "w1")
    assert queue_other.empty()
    assert queue_fresh.empty()
    inboxes.close(on_lost)
    assert inboxes.worker_lost("w1", "heartbeat_timeout") == 1  # the untaken one, again (it is still open)
    del untaken, fresh


async def test_the_lost_worker_error_names_the_worker_a_retry_avoids() -> None:
    inboxes = Inboxes(_NoNats())  # type: ignore[arg-type]
    inbox, queue = inboxes.open()
    inboxes.taken(inbox, "w1")
    assert inboxes.worker_lost("w1", "heartbeat_timeout") == 1
    error = queue.get_nowait()
    assert isinstance(error, WorkerLost)
    assert (error.code, error.worker_id) == (WORKER_LOST, "w1")


async def test_a_worker_whose_connection_was_made_again_ends_its_requests_and_every_untaken_one() -> None:
    inboxes = Inboxes(_NoNats())  # type: ignore[arg-type]
    on_it, queue_on_it = inboxes.open()
    on_other, queue_other = inboxes.open()
    inboxes.taken(on_it, "w1")
    inboxes.taken(on_other, "w2")
    _, queue_untaken = inboxes.open()  # just sent: router_svc or w1 may have held it on the server that went away
    assert inboxes.worker_reconnected("w1") == 2
    for queue in (queue_on_it, queue_untaken):
        assert_ended(queue, WORKER_LOST, 2.0, "lost its connection to NATS (made again since)")
    assert queue_other.empty()
    del on_other


def test_a_reconnect_counts_when_a_workers_count_rises_not_when_it_is_first_seen() -> None:
    counts = ReconnectCounts()

    assert not counts.rose("w1", 3)  # a gateway that starts late sees a count already up
    assert not counts.rose("w1", 3)
    assert counts.rose("w1", 4)
    assert not counts.rose("w2", 0)
    counts.forget("w1")  # lost: it may come back under its id with a connection of its own
    assert not counts.rose("w1", 0)
    assert counts.rose("w1", 1)


def test_the_gateway_reads_a_workers_id_and_reconnect_count_from_its_whole_heartbeat() -> None:
    beat = WorkerHeartbeat(
        worker_id="w1", host="h", cpu_count=2, ram_bytes=1, accelerator_bytes=0, providers=("cpu",), bus_reconnects=3
    )
    assert read_beat(msgspec.json.encode(beat)) == ("w1", 3)
    assert read_beat(b'{"worker_id": "w2"}') == ("w2", 0)  # a worker from before the count: none
    with pytest.raises(msgspec.ValidationError):
        read_beat(b'{"bus_reconnects": 1}')


async def test_a_dropped_connection_ends_every_request_in_flight_at_once() -> None:
    inboxes = Inboxes(_NoNats())  # type: ignore[arg-type]
    taken, queue_taken = inboxes.open()
    _, queue_untaken = inboxes.open()
    closed, queue_closed = inboxes.open()
    inboxes.taken(taken, "w1")
    inboxes.close(closed)
    assert inboxes.bus_lost("nats://127.0.0.1:4222") == 2
    for queue in (queue_taken, queue_untaken):
        assert_ended(queue, BUS_LOST, 1.0, "lost its connection to NATS at nats://127.0.0.1:4222")
    assert queue_closed.empty()  # a request that had ended is not touched
