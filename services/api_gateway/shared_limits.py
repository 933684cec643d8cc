"""The gateway's rate limiter: per-key buckets shared by every gateway, through a compare-and-set store.

The arithmetic is ``api_gateway.ratelimit`` (pure); this shell keeps one lease per key, asks the shared
buckets (read, :func:`~api_gateway.ratelimit.take`, write at the revision read, again on a conflict) when
the lease cannot decide, and writes the tokens finished requests used in the background, one
compare-and-set per key at a time. The store is the JetStream KV bucket ``NRT_RATE_LIMITS``
(``nrt.adapters.bus.kv.JetStreamCas``); fast tests give it an in-memory one.

A key without limits costs nothing; a key with limits costs one round trip per lease (a batch of
requests, ``NRT_GATEWAY_RATE_LEASE_SHARE`` of its burst, for at most ``NRT_GATEWAY_RATE_LEASE_S``), so
the common case decides in the process. When the store cannot be reached the request is refused
(:class:`LimitsUnavailable`): a limit that cannot be checked is not waived.
"""

from __future__ import annotations

import asyncio
import contextlib
import functools
import logging
import random
import time
from collections.abc import Callable
from dataclasses import dataclass

import msgspec

from api_gateway.ratelimit import (
    KeyLimits,
    Lease,
    Refusal,
    SharedBuckets,
    Taken,
    owing,
    renewed,
    settled,
    spend,
    take,
    unspent,
)
from nrt.adapters.bus.kv import CasStore, StaleRevision, Versioned
from nrt.core.state import ApiKey

log = logging.getLogger("api_gateway.limits")

CAS_ATTEMPTS = 32  # compare-and-set attempts before giving up (each loses only to another gateway's write)
BACKOFF_S = 0.001  # after the n-th lost compare-and-set, wait up to BACKOFF_S * 2**n (random), at most MAX_BACKOFF_S:
MAX_BACKOFF_S = 0.05  # without it, two gateways asking at once can starve one of them
_encode = msgspec.json.Encoder().encode
_decode = msgspec.json.Decoder(SharedBuckets).decode


class LimitsUnavailable(Exception):
    """The shared buckets could not be read or written: the request is refused, not let through unchecked."""


@dataclass(frozen=True, slots=True)
class LeaseTerms:
    share: float  # of a key's request burst leased at once
    lease_s: float  # how long a lease (and a cached refusal) lasts


@dataclass
class _Key:
    limits: KeyLimits
    lock: asyncio.Lock
    lease: Lease | None = None
    flushing: asyncio.Task[None] | None = None


class SharedRateLimiter:
    def __init__(self, store: CasStore, terms: LeaseTerms, clock: Callable[[], float] = time.time) -> None:
        self.store = store
        self.terms = terms
        self.clock = clock  # wall clock: the shared buckets' times are compared across hosts
        self._keys: dict[str, _Key] = {}
        self.asked = 0  # compare-and-set rounds made (what a request costs beyond the process)

    def _key(self, key_id: str, limits: KeyLimits) -> _Key:
        held = self._keys.get(key_id)
        if held is None:
            held = self._keys[key_id] = _Key(limits=limits, lock=asyncio.Lock())
        return held

    async def admit(self, key: ApiKey) -> Refusal | None:
        """Take one request from ``key``'s budget: None when it may go, else why not and for how long."""
        limits = KeyLimits.of(key)
        if not limits.limited:
            return None
        held = self._key(key.key_id, limits)
        decided = spend(held.lease, limits, self.clock())
        if decided.admitted or decided.refusal is not None:
            held.lease = decided.lease
            return decided.refusal
        async with held.lock:  # one compare-and-set per key at a time; the others wait and use its lease
            decided = spend(held.lease, limits, self.clock())
            if decided.admitted or decided.refusal is not None:
                held.lease = decided.lease
                return decided.refusal
            await self._renew(key.key_id, held)
            decided = spend(held.lease, limits, self.clock())
            held.lease = decided.lease
            return decided.refusal if not decided.admitted else None

    async def _renew(self, key_id: str, held: _Key) -> None:
        lease = held.lease
        owed, since = (lease.owed, lease.owed_since) if lease is not None else (0, None)
        returned = unspent(lease)
        want = held.limits.batch(self.terms.share)

        def change(buckets: SharedBuckets | None, now: float) -> Taken:
            return take(buckets, held.limits, now, want, returned=returned, charge=owed, charged_at=since)

        taken, now = await self._cas(key_id, change)
        held.lease = renewed(held.lease, taken, owed, now, self.terms.lease_s)

    def charge(self, key_id: str | None, tokens: int) -> None:
        """Count ``tokens`` a finished request of ``key_id`` used (keys without a token limit: nothing); the
        shared bucket gets them in the background."""
        if key_id is None:
            return
        held = self._keys.get(key_id)
        if held is None or held.limits.tokens_per_min is None or held.lease is None or tokens <= 0:
            return
        held.lease = owing(held.lease, tokens, self.clock())
        if held.flushing is None or held.flushing.done():
            held.flushing = asyncio.get_running_loop().create_task(self._flush(key_id, held))

    async def _flush(self, key_id: str, held: _Key) -> None:
        """Write what ``key_id`` owes to its shared token bucket, until it owes nothing."""
        while held.lease is not None and held.lease.owed > 0:
            async with held.lock:
                owed, since = held.lease.owed, held.lease.owed_since
                try:
                    taken, _ = await self._cas(key_id, functools.partial(_charging, held.limits, owed, since))
                except LimitsUnavailable as exc:  # kept owed: the next lease or charge writes it
                    log.warning("the tokens key %s used are not written yet: %s", key_id, exc)
                    return
                held.lease = settled(held.lease, taken, owed)

    async def _cas(self, key_id: str, change: Callable[[SharedBuckets | None, float], Taken]) -> tuple[Taken, float]:
        """Read the key's shared buckets, apply ``change`` at the time of reading, write at that revision; again
        while another gateway wrote in between."""
        for attempt in range(CAS_ATTEMPTS):
            if attempt > 0:
                await asyncio.sleep(random.uniform(0.0, min(MAX_BACKOFF_S, BACKOFF_S * 2**attempt)))
            self.asked += 1
            try:
                current = await self.store.read(key_id)
                now = self.clock()
                taken = change(_decode(current.value) if current is not None else None, now)
                await self.store.write(key_id, _encode(taken.buckets), _revision(current))
            except StaleRevision:
                continue
            except msgspec.DecodeError as exc:
                raise LimitsUnavailable(f"the shared rate-limit state of key {key_id} does not decode: {exc}") from None
            except Exception as exc:  # the bus: not connected, timed out, refused
                raise LimitsUnavailable(f"the shared rate limits cannot be reached: {exc}") from exc
            return taken, now
        raise LimitsUnavailable(f"the shared rate limits of key {key_id} changed {CAS_ATTEMPTS} times while read")

    async def close(self) -> None:
        """Write what is still owed (best effort: the gateway is stopping)."""
        tasks = [held.flushing for held in self._keys.values() if held.flushing is not None]
        for task in tasks:
            with contextlib.suppress(Exception):
                await asyncio.wait_for(task, 2.0)


def _charging(limits: KeyLimits, owed: int, since: float, buckets: SharedBuckets | None, now: float) -> Taken:
    return take(buckets, limits, now, 0, charge=owed, charged_at=since)


def _revision(current: Versioned | None) -> int | None:
    return current.revision if current is not None else None
