"""Per-key rate limits hold across gateways, on real NATS: the JetStream KV bucket they share passes the
compare-and-set contract, the gateway's bus identity may use it (and a worker's may not), and two
gateways driving one key admit, together, what one bucket allows plus at most a batch per gateway."""

from __future__ import annotations

import asyncio
import contextlib
import gc
import math
import time
import uuid
from collections import Counter
from collections.abc import AsyncIterator
from dataclasses import dataclass, field
from datetime import UTC, datetime
from pathlib import Path

import httpx
import nats
import pytest
from litestar import Litestar
from nats.js.errors import NotFoundError

from api_gateway.ratelimit import KeyLimits
from api_gateway.settings import GatewaySettings
from api_gateway.shared_limits import LeaseTerms, SharedRateLimiter
from cas_contract import *  # noqa: F403  (the contract's tests)
from harness import extra_gateway, start_stack
from nrt.adapters.bus import subjects
from nrt.adapters.bus.connection import connect
from nrt.adapters.bus.credentials import BusCredentials
from nrt.adapters.bus.jetstream import EventPublisher, ensure_kv_bucket
from nrt.adapters.bus.kv import JetStreamCas
from nrt.core.api_keys import generate_key, key_id_of, key_sha256
from nrt.core.events import ApiKeyCreated
from nrt.core.state import ApiKey
from nrt.core.vocabulary import KeyScope

RPS = 20.0  # the key's limit: a burst of 20, 20 a second
SHARE = 0.25  # each gateway leases 5 at a time
DRIVE_S = 2.0
CLIENTS_PER_GATEWAY = 6


@pytest.fixture
async def cas(nats_url: str) -> AsyncIterator[JetStreamCas]:
    """A JetStream KV bucket of its own, made as the gateway makes ``NRT_RATE_LIMITS``."""
    nc = await nats.connect(nats_url)
    bucket = f"NRT_TEST_CAS_{uuid.uuid4().hex[:8]}"
    js = nc.jetstream()
    try:
        yield JetStreamCas(await ensure_kv_bucket(js, bucket, "a test of the CAS contract"))
    finally:
        with contextlib.suppress(NotFoundError):
            await js.delete_key_value(bucket)
        await nc.close()


def _key(rps: float) -> ApiKey:
    return ApiKey(
        key_id=uuid.uuid4().hex[:12],
        name="shared",
        scope=KeyScope.INFER,
        key_sha256="0" * 64,
        rps=rps,
        created_at=datetime.now(UTC),
    )


async def test_the_gateway_identity_may_share_limits_and_a_worker_may_not(secure_nats_url: str, bus_keys: Path) -> None:
    gateway = await connect(
        secure_nats_url, name="test gateway", credentials=BusCredentials.of(bus_keys, "api_gateway")
    )
    try:
        kv = await ensure_kv_bucket(gateway.jetstream(timeout=3), subjects.RATE_LIMITS_BUCKET, "rate limits")
        limiter = SharedRateLimiter(JetStreamCas(kv), LeaseTerms(share=0.5, lease_s=1.0))
        key = _key(rps=2)  # burst 2, leased one at a time
        assert [await limiter.admit(key) for _ in range(2)] == [None, None]  # a create, then an update
        refused = await limiter.admit(key)
        assert refused is not None
        assert refused.limit == "requests per second"
        assert limiter.asked == 3
    finally:
        await gateway.close()
    worker = await connect(
        secure_nats_url, name="test worker", credentials=BusCredentials.of(bus_keys, "specialist_worker")
    )
    try:
        # the server drops what it does not permit: JetStream's API does not answer
        with pytest.raises((nats.errors.TimeoutError, nats.errors.NoRespondersError)):
            await worker.jetstream(timeout=1).key_value(subjects.RATE_LIMITS_BUCKET)
    finally:
        await worker.close()


@dataclass
class _Drive:
    """One gateway's clients, connected before the drive (a connection made during it is time the key's
    bucket refills into a full bucket, unspent), and what the drive saw."""

    http: httpx.AsyncClient
    statuses: Counter[int] = field(default_factory=Counter)
    first_at: float = math.inf  # monotonic time of the first answer
    last_at: float = -math.inf  # and of the last

    async def connect(self) -> None:
        """Open every client's connection on a path that spends nothing of the key (the probes)."""
        await asyncio.gather(*(self.http.get("/healthz") for _ in range(CLIENTS_PER_GATEWAY)))

    async def run(self, until: float) -> None:
        """Requests from several clients until ``until``."""

        async def client() -> None:
            while time.monotonic() < until:
                status = (await self.http.get("/v1/models")).status_code
                now = time.monotonic()
                self.statuses[status] += 1
                self.first_at, self.last_at = min(self.first_at, now), max(self.last_at, now)

        await asyncio.gather(*(client() for _ in range(CLIENTS_PER_GATEWAY)))


@contextlib.asynccontextmanager
async def _driving(url: str, key: str) -> AsyncIterator[_Drive]:
    limits = httpx.Limits(max_connections=CLIENTS_PER_GATEWAY, max_keepalive_connections=CLIENTS_PER_GATEWAY)
    headers = {"Authorization": f"Bearer {key}"}
    async with httpx.AsyncClient(base_url=url, timeout=10, headers=headers, limits=limits) as http:
        drive = _Drive(http)
        await drive.connect()
        yield drive


async def _known(url: str, key: str, within: float = 10.0) -> None:
    """Until the gateway at ``url`` has folded the key's ``ApiKeyCreated`` (a 401 spends nothing)."""
    deadline = time.monotonic() + within
    async with httpx.AsyncClient(base_url=url, timeout=5, headers={"Authorization": f"Bearer {key}"}) as http:
        while (await http.get("/v1/models")).status_code == 401:
            assert time.monotonic() < deadline, f"{url} did not learn the key"
            await asyncio.sleep(0.05)


def _asked(app: Litestar) -> int:
    limiter: SharedRateLimiter = app.state.cluster_link.require().limiter
    return limiter.asked


async def test_two_gateways_on_one_key_admit_what_one_bucket_allows(nats_url: str, nrt_home: object) -> None:
    settings = GatewaySettings(
        nats_url=nats_url,
        route_timeout=10,
        idle_timeout=10,
        request_timeout=30,
        rate_lease_share=SHARE,
        rate_lease_s=1.0,
    )
    async with (
        start_stack(nats_url, "tiny-support.yaml", settings=settings) as stack,
        extra_gateway(settings) as (second_url, second_app),
    ):
        key = generate_key()
        digest = key_sha256(key)
        created = ApiKeyCreated(
            key_id=key_id_of(digest), name="shared", scope=KeyScope.INFER, key_sha256=digest, rps=RPS
        )
        await EventPublisher(stack.nc).publish(created)
        first_app = stack.gateway.config.app
        assert isinstance(first_app, Litestar)
        for url in (stack.base_url, second_url):
            await _known(url, key)
        async with _driving(stack.base_url, key) as one, _driving(second_url, key) as two:
            await asyncio.sleep(2.0)  # the bucket is full again and the leases the probes took have lapsed
            asked_before = _asked(first_app) + _asked(second_app)
            gc.collect()  # a full collection of the suite's heap inside the drive is time nobody is admitted
            gc.freeze()
            try:
                started = time.monotonic()
                await asyncio.gather(one.run(started + DRIVE_S), two.run(started + DRIVE_S))
            finally:
                gc.unfreeze()
            window = time.monotonic() - started  # every decision of the drive fell within it
            answered = max(one.last_at, two.last_at) - min(one.first_at, two.first_at)  # and within this
            asked = _asked(first_app) + _asked(second_app) - asked_before
        first, second = one.statuses, two.statuses
    assert set(first) | set(second) <= {200, 429}, (first, second)  # nothing else: no 503, no error
    admitted = first[200] + second[200]
    batch = KeyLimits(rps=RPS).batch(SHARE)
    assert batch == 5
    bound = max(1.0, RPS) + RPS * window + 2 * (batch - 1)
    print(
        f"two gateways, one key at {RPS:g} rps over {window:.2f}s: admitted {admitted} "
        f"({first[200]} + {second[200]}) of {admitted + first[429] + second[429]} requests; bound {bound:.1f}; "
        f"one bucket per gateway would allow {2 * (max(1.0, RPS) + RPS * window):.0f}; "
        f"{asked} compare-and-set rounds ({asked / max(1, admitted):.2f} per admitted request); "
        f"answers from {min(one.first_at, two.first_at) - started:.3f}s to {answered:.2f}s later"
    )
    assert admitted <= bound
    # and the key gets its rate while answers came (the demand was far above it): its burst and the refill, less
    # what can be left unspent at the end (a batch refilling in the bucket for a gateway's recheck, a lease per
    # gateway) and a request's worth of the time between a decision and its answer
    assert admitted >= max(1.0, RPS) + RPS * answered - batch - 2 * batch - 1
    assert first[200] > 0
    assert second[200] > 0  # each gateway admits some: neither holds the whole bucket
    assert first[429] > 0
    assert second[429] > 0
