"""Per-key rate limits shared by every gateway, without a server: the pure bucket arithmetic and leases
(``api_gateway.ratelimit``), the limiter's shell (``api_gateway.shared_limits``) on the in-memory
compare-and-set store, and that store's contract (the JetStream KV passes it too:
``tests/integration/gateway/test_rate_limits_across_gateways.py``)."""

from __future__ import annotations

import asyncio
import random
from datetime import UTC, datetime

import pytest

from api_gateway.ratelimit import KeyLimits, Lease, Level, Refusal, SharedBuckets, spend, take
from api_gateway.shared_limits import CAS_ATTEMPTS, LeaseTerms, LimitsUnavailable, SharedRateLimiter
from cas_contract import *  # noqa: F403  (the contract's tests)
from nrt.adapters.bus.kv import CasStore, StaleRevision, Versioned
from nrt.core.state import ApiKey
from nrt.core.vocabulary import KeyScope
from nrt.testing.memory_kv import MemoryCas

T0 = datetime(2026, 3, 1, tzinfo=UTC)


@pytest.fixture
def cas() -> MemoryCas:
    return MemoryCas()


def limited(rps: float | None = None, tokens_per_min: int | None = None, key_id: str = "k1") -> ApiKey:
    return ApiKey(
        key_id=key_id,
        name="limited",
        scope=KeyScope.INFER,
        key_sha256="0" * 64,
        rps=rps,
        tokens_per_min=tokens_per_min,
        created_at=T0,
    )


class Clock:
    def __init__(self) -> None:
        self.now = 100.0

    def __call__(self) -> float:
        return self.now


def gateway(store: CasStore, clock: Clock, share: float = 0.1, lease_s: float = 1.0) -> SharedRateLimiter:
    return SharedRateLimiter(store, LeaseTerms(share=share, lease_s=lease_s), clock)


# -- the arithmetic ------------------------------------------------------------------------------------


def test_take_leases_at_most_what_the_bucket_holds_and_refuses_with_the_wait() -> None:
    limits = KeyLimits(rps=10)
    first = take(None, limits, 100.0, 4)  # a bucket never seen is full: 10
    assert first.granted == 4
    assert first.refusal is None
    assert first.buckets.requests == Level(level=6.0, at=100.0)
    rest = take(first.buckets, limits, 100.0, 10)
    assert rest.granted == 6  # what is left, not what was asked
    empty = take(rest.buckets, limits, 100.0, 10)
    assert empty.granted == 0
    assert empty.refusal == Refusal("requests per second", 10, 0.1)
    later = take(empty.buckets, limits, 100.25, 10)  # 2.5 back: two whole requests
    assert later.granted == 2


def test_take_gives_back_unspent_requests_but_never_beyond_the_burst() -> None:
    limits = KeyLimits(rps=10)
    taken = take(None, limits, 100.0, 5)
    back = take(taken.buckets, limits, 100.0, 0, returned=3)
    assert back.buckets.requests == Level(level=8.0, at=100.0)
    capped = take(back.buckets, limits, 200.0, 0, returned=5)
    assert capped.buckets.requests == Level(level=10.0, at=200.0)


def test_take_charges_tokens_below_zero_and_the_token_limit_refuses_first() -> None:
    limits = KeyLimits(rps=10, tokens_per_min=60)
    charged = take(None, limits, 100.0, 0, charge=90)  # 60 - 90
    assert charged.buckets.tokens == Level(level=-30.0, at=100.0)
    refused = take(charged.buckets, limits, 100.0, 3)
    assert refused.granted == 0
    assert refused.refusal == Refusal("tokens per minute", 60, 31.0)
    assert refused.buckets.requests == Level(level=10.0, at=100.0)  # nothing taken


def test_a_clock_behind_the_bucket_refills_nothing() -> None:
    limits = KeyLimits(rps=10)
    buckets = SharedBuckets(requests=Level(level=0.0, at=100.0))
    assert take(buckets, limits, 99.0, 1).granted == 0  # another host's clock is ahead: no refill, no error
    assert take(buckets, limits, 100.1, 1).granted == 1


def test_the_batch_is_a_share_of_the_burst_at_least_one() -> None:
    assert KeyLimits(rps=100).batch(0.1) == 10
    assert KeyLimits(rps=2).batch(0.1) == 1
    assert KeyLimits(rps=0.1).batch(0.5) == 1
    assert KeyLimits(tokens_per_min=600).batch(0.1) is None  # no request limit: a lease of any number


def test_spend_admits_from_a_live_lease_and_asks_when_it_lapses_or_runs_out() -> None:
    limits = KeyLimits(rps=10)
    lease = Lease(left=2, until=101.0)
    one = spend(lease, limits, 100.5)
    assert one.admitted
    assert one.lease == Lease(left=1, until=101.0)
    assert spend(one.lease, limits, 100.6).admitted
    out = spend(Lease(left=0, until=101.0), limits, 100.7)
    assert (out.admitted, out.refusal) == (False, None)  # ask
    lapsed = spend(Lease(left=5, until=101.0), limits, 101.0)
    assert (lapsed.admitted, lapsed.refusal) == (False, None)
    assert spend(None, limits, 100.0) == spend(None, limits, 100.0)


def test_spend_refuses_locally_on_a_refusal_it_was_given_and_on_its_token_view() -> None:
    limits = KeyLimits(rps=1, tokens_per_min=60)
    refused = Lease(
        left=0,
        until=100.0,
        refused=Refusal("requests per second", 1, 0.8),
        refused_at=100.0,
        recheck_at=100.8,
    )
    again = spend(refused, limits, 100.5)
    assert again.refusal is not None
    assert again.refusal.wait_s == pytest.approx(0.3)
    assert spend(refused, limits, 100.8).refusal is None  # time to ask the shared bucket again
    overdrawn = Lease(left=5, until=101.0, tokens=Level(level=10.0, at=100.0), owed=20)
    by_tokens = spend(overdrawn, limits, 100.0)
    assert by_tokens.refusal == Refusal("tokens per minute", 60, 11.0)  # 10 - 20 = -10: 11 s to one token


# -- one gateway: the limits as before -----------------------------------------------------------------


async def test_requests_per_second_a_bucket_of_one_seconds_burst(cas: MemoryCas) -> None:
    clock = Clock()
    limiter = gateway(cas, clock)
    key = limited(rps=2)
    assert await limiter.admit(key) is None
    assert await limiter.admit(key) is None
    refused = await limiter.admit(key)
    assert refused is not None
    assert refused.limit == "requests per second"
    assert refused.wait_s == 0.5
    assert refused.retry_after == 1  # whole seconds, at least 1
    clock.now += 0.5
    assert await limiter.admit(key) is None
    assert await limiter.admit(key) is not None
    clock.now += 10  # refills up to the burst, no more
    burst = [await limiter.admit(key) for _ in range(3)]
    assert burst[:2] == [None, None]
    assert burst[2] is not None


async def test_a_slow_limit_asks_for_a_longer_wait(cas: MemoryCas) -> None:
    limiter = gateway(cas, Clock())
    key = limited(rps=0.1)  # one request every ten seconds
    assert await limiter.admit(key) is None
    refused = await limiter.admit(key)
    assert refused is not None
    assert refused.retry_after == 10


async def test_tokens_per_minute_refuses_while_the_key_is_over(cas: MemoryCas) -> None:
    clock = Clock()
    limiter = gateway(cas, clock)
    key = limited(tokens_per_min=60)  # one token a second back
    assert await limiter.admit(key) is None
    limiter.charge("k1", 90)  # a large answer overdraws the bucket: 60 - 90 = -30
    refused = await limiter.admit(key)  # at once, before the charge is written: this gateway knows
    assert refused is not None
    assert refused.limit == "tokens per minute"
    assert refused.retry_after == 31
    clock.now += 30.5
    assert await limiter.admit(key) is None
    limiter.charge("other", 10**6)  # a key without a bucket is charged nothing
    limiter.charge(None, 10)
    await limiter.close()


async def test_a_key_without_limits_is_never_refused_and_costs_no_round_trip(cas: MemoryCas) -> None:
    limiter = gateway(cas, Clock())
    assert all([await limiter.admit(limited()) is None for _ in range(1000)])
    assert (limiter.asked, cas.reads, cas.writes) == (0, 0, 0)


# -- several gateways ----------------------------------------------------------------------------------


async def test_tokens_one_gateway_charges_hold_back_the_other(cas: MemoryCas) -> None:
    clock = Clock()
    one, other = gateway(cas, clock), gateway(cas, clock)
    key = limited(tokens_per_min=60)
    assert await one.admit(key) is None
    one.charge("k1", 100)
    await one.close()  # the charge is written
    clock.now += 1.0  # the other's first lease reads the shared bucket: 60 - 100 + 1
    refused = await other.admit(key)
    assert refused is not None
    assert refused.limit == "tokens per minute"
    assert refused.retry_after == 40


async def test_two_gateways_on_one_key_stay_within_the_limit_plus_a_batch_each(cas: MemoryCas) -> None:
    """Demand far above the limit through two gateways, in random order over 3 s: in every window the
    admitted total is within one bucket's (burst + rate * window) plus batch - 1 per gateway, and the
    key is not starved either."""
    clock = Clock()
    rps, share = 20.0, 0.25  # burst 20, batch 5
    gateways = [gateway(cas, clock, share=share, lease_s=0.5) for _ in range(2)]
    key = limited(rps=rps)
    rng = random.Random(28)
    step, steps = 0.01, 300
    admitted_at: list[int] = []  # admitted per step
    tried: list[int] = []  # requests per step
    start = clock.now
    for _ in range(steps):
        tries = [g for g in gateways for _ in range(rng.randint(0, 4))]
        rng.shuffle(tries)
        results = await asyncio.gather(*(g.admit(key) for g in tries))
        admitted_at.append(sum(r is None for r in results))
        tried.append(len(results))
        clock.now += step
    batch = KeyLimits(rps=rps).batch(share)
    assert batch == 5
    slack = len(gateways) * (batch - 1)
    for a in range(steps):
        total = 0
        for b in range(a, steps):
            total += admitted_at[b]
            window = (b - a) * step
            assert total <= max(1.0, rps) + rps * window + slack + 1e-9, (a, b, total)
    elapsed = clock.now - start
    assert sum(admitted_at) >= rps * elapsed  # the key gets its rate, shared between the gateways
    # most refusals are decided in the process: a refusal is cached until a batch is back in the bucket
    assert sum(g.asked for g in gateways) <= sum(admitted_at)
    assert sum(g.asked for g in gateways) * 10 <= sum(tried)


async def test_a_lease_spends_its_batch_without_a_round_trip(cas: MemoryCas) -> None:
    clock = Clock()
    limiter = gateway(cas, clock, share=0.1)  # rps 1000: batches of 100
    key = limited(rps=1000)
    admitted = 0
    for _ in range(1000):
        admitted += await limiter.admit(key) is None
        clock.now += 0.001
    assert admitted == 1000
    assert limiter.asked <= 11  # one compare-and-set per 100 requests (and the first)
    assert cas.writes == limiter.asked


async def test_concurrent_requests_share_one_compare_and_set(cas: MemoryCas) -> None:
    limiter = gateway(cas, Clock(), share=0.5)  # rps 100: batches of 50
    results = await asyncio.gather(*(limiter.admit(limited(rps=100)) for _ in range(40)))
    assert all(r is None for r in results)
    assert limiter.asked == 1


async def test_a_conflict_reads_again_and_a_lost_store_refuses(cas: MemoryCas) -> None:
    class Contended(MemoryCas):
        """Another gateway writes between every read and write, ``conflicts`` times."""

        def __init__(self, conflicts: int) -> None:
            super().__init__()
            self.conflicts = conflicts

        async def write(self, key: str, value: bytes, last: int | None) -> int:
            if self.conflicts > 0:
                self.conflicts -= 1
                await super().write(key, value, self.values[key].revision if key in self.values else None)
                raise StaleRevision("another gateway wrote first")
            return await super().write(key, value, last)

    limiter = gateway(Contended(3), Clock())
    assert await limiter.admit(limited(rps=5)) is None
    assert limiter.asked == 4
    never = gateway(Contended(CAS_ATTEMPTS), Clock())
    with pytest.raises(LimitsUnavailable, match="changed"):
        await never.admit(limited(rps=5))

    class Gone(MemoryCas):
        async def read(self, key: str) -> Versioned | None:
            raise ConnectionError("nats: connection closed")

    with pytest.raises(LimitsUnavailable, match="cannot be reached"):
        await gateway(Gone(), Clock()).admit(limited(rps=5))
    assert await gateway(Gone(), Clock()).admit(limited()) is None  # no limits: nothing to check


async def test_state_that_does_not_decode_is_a_clear_error(cas: MemoryCas) -> None:
    await cas.write("k1", b"not json", None)
    with pytest.raises(LimitsUnavailable, match="does not decode"):
        await gateway(cas, Clock()).admit(limited(rps=5))


async def test_two_gateways_asking_for_every_request_at_once_all_get_through(cas: MemoryCas) -> None:
    """A compare-and-set per request (leases of one) from two gateways at once: conflicts are retried after a
    random wait, so neither is starved into refusing with LimitsUnavailable."""
    gateways = [gateway(cas, Clock(), share=1e-9) for _ in range(2)]
    key = limited(rps=1e6)

    async def caller(limiter: SharedRateLimiter) -> list[Refusal | None]:
        return [await limiter.admit(key) for _ in range(25)]

    results = await asyncio.gather(*(caller(g) for g in gateways for _ in range(8)))
    assert all(r is None for some in results for r in some)
    assert sum(g.asked for g in gateways) >= 400  # every admission was a compare-and-set (and some lost one)
