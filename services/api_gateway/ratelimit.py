"""Per-key rate limits shared by every gateway: the bucket arithmetic and a gateway's lease. Pure; the clock is given.

A key's limits are two token buckets, kept once for the whole cluster (``SharedBuckets``, stored
by ``api_gateway.shared_limits`` in a JetStream KV bucket and changed only by compare-and-set):

- requests: a bucket of ``max(1, rps)`` requests refilled at ``rps`` per second (a second's
  burst); each admitted request takes one.
- tokens: a bucket of ``tokens_per_min`` tokens refilled at ``tokens_per_min / 60`` per second;
  a finished request is charged its prompt and completion tokens (the bucket may go below
  zero), and a key whose bucket is empty or overdrawn gets no new request until it refills.

A gateway does not ask the shared buckets for every request: it takes a batch of requests at once
(:func:`take`, one compare-and-set) and spends them locally (:func:`spend`) for up to a lease's
time, giving back what it did not spend when the lease lapses. Its view of the token bucket (as of
its last compare-and-set, less what it has charged since) refuses locally: other gateways can only
lower the shared level.

The bound: over any interval of ``T`` seconds, the requests a key gets admitted across the whole
cluster stay within ``max(1, rps) + rps * T`` (one bucket's) plus at most ``batch - 1`` per gateway
(what each may hold, leased and not yet spent), ``batch = max(1, floor(share * max(1, rps)))``.
Bucket level plus the leases held can only grow by the refill, so nothing else can be spent. Times are
wall-clock seconds, every gateway's own: a gateway whose clock runs ``d`` seconds ahead refills ``rps * d``
early, once (a bucket's time never goes back, so a clock behind refills nothing until it catches up).

A refusal says which limit and how long until a retry can succeed.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, replace
from typing import Literal

import msgspec

from nrt.core.state import ApiKey

Limit = Literal["requests per second", "tokens per minute"]
EPSILON = 1e-9  # a refill that lands a hair below a whole request (floating point) still counts it


class Level(msgspec.Struct, frozen=True):
    """A bucket's level at a moment (wall-clock seconds: every gateway's clock reads it)."""

    level: float
    at: float


class SharedBuckets(msgspec.Struct, frozen=True):
    """One key's buckets as the whole cluster shares them (None: the key has no such limit, or it is unused)."""

    requests: Level | None = None
    tokens: Level | None = None


@dataclass(frozen=True, slots=True)
class Refusal:
    limit: Limit
    allowed: float  # the key's limit
    wait_s: float  # until a retry can succeed

    @property
    def retry_after(self) -> int:
        """``Retry-After`` in whole seconds, at least 1."""
        return max(1, math.ceil(self.wait_s))


@dataclass(frozen=True, slots=True)
class KeyLimits:
    """A key's limits (None: none of that kind)."""

    rps: float | None = None
    tokens_per_min: int | None = None

    @classmethod
    def of(cls, key: ApiKey) -> KeyLimits:
        return cls(rps=key.rps, tokens_per_min=key.tokens_per_min)

    @property
    def limited(self) -> bool:
        return self.rps is not None or self.tokens_per_min is not None

    def batch(self, share: float) -> int | None:
        """How many requests a gateway leases at once: ``share`` of the request burst, at least one
        (None: no request limit, a lease admits any number while the token bucket has some)."""
        if self.rps is None:
            return None
        return max(1, math.floor(share * max(1.0, self.rps)))


def refill(level: Level | None, capacity: float, rate: float, now: float) -> Level:
    """``level`` brought up to ``now`` (a bucket never seen is full); a clock behind ``at`` refills nothing."""
    if level is None:
        return Level(level=capacity, at=now)
    if now <= level.at:
        return level
    return Level(level=min(capacity, level.level + (now - level.at) * rate), at=now)


def _requests(level: Level | None, rps: float, now: float) -> Level:
    return refill(level, max(1.0, rps), rps, now)


def _tokens(level: Level | None, tokens_per_min: int, now: float) -> Level:
    return refill(level, float(tokens_per_min), tokens_per_min / 60.0, now)


def _charged(level: Level | None, tokens_per_min: int, charge: int, charged_at: float, now: float) -> Level:
    """The token bucket at ``now`` after ``charge`` tokens taken at ``charged_at`` (the refill before and after)."""
    before = _tokens(level, tokens_per_min, min(charged_at, now))
    return _tokens(Level(level=before.level - charge, at=before.at), tokens_per_min, now)


def _token_refusal(level: float, tokens_per_min: int) -> Refusal:
    return Refusal("tokens per minute", tokens_per_min, (1.0 - level) / (tokens_per_min / 60.0))


@dataclass(frozen=True, slots=True)
class Taken:
    """What :func:`take` did to the shared buckets."""

    buckets: SharedBuckets  # to write back
    granted: int | None  # requests leased (None: any number, the key has no request limit)
    refusal: Refusal | None  # why nothing was granted, when ``want`` asked for something
    recheck_s: float = 0.0  # after a refusal: until the bucket holds what was wanted (no sooner worth asking)


def take(
    buckets: SharedBuckets | None,
    limits: KeyLimits,
    now: float,
    want: int | None,
    *,
    returned: int = 0,
    charge: int = 0,
    charged_at: float | None = None,
) -> Taken:
    """The shared buckets after a gateway gives back ``returned`` unspent requests, charges ``charge`` tokens (used
    at ``charged_at``, default ``now``) and asks for ``want`` requests (0: only the other two; None: a lease
    without a request limit)."""
    buckets = buckets or SharedBuckets()
    requests = tokens = None
    if limits.rps is not None:
        requests = _requests(buckets.requests, limits.rps, now)
        if returned > 0:
            requests = Level(level=min(max(1.0, limits.rps), requests.level + returned), at=requests.at)
    if limits.tokens_per_min is not None:
        since = now if charged_at is None else charged_at
        tokens = _charged(buckets.tokens, limits.tokens_per_min, charge, since, now)
    granted: int | None = 0
    refusal = None
    recheck_s = 0.0
    if want != 0:
        if tokens is not None and limits.tokens_per_min is not None and tokens.level <= 0:
            refusal = _token_refusal(tokens.level, limits.tokens_per_min)
            recheck_s = refusal.wait_s
        elif requests is not None and limits.rps is not None:
            granted = min(want or 1, math.floor(requests.level + EPSILON))
            if granted <= 0:
                granted = 0
                refusal = Refusal("requests per second", limits.rps, (1.0 - requests.level) / limits.rps)
                recheck_s = ((want or 1) - requests.level) / limits.rps  # a whole batch back: one ask per batch
            else:
                requests = Level(level=requests.level - granted, at=requests.at)
        else:
            granted = want
    return Taken(SharedBuckets(requests=requests, tokens=tokens), granted, refusal, recheck_s)


@dataclass(frozen=True, slots=True)
class Lease:
    """What one gateway holds of one key's shared buckets."""

    left: int | None  # requests it may still admit without asking (None: any number, no request limit)
    until: float  # when ``left`` lapses (and is given back)
    tokens: Level | None = None  # the shared token bucket as of the last compare-and-set
    owed: int = 0  # tokens charged here since, not yet written to the shared bucket...
    owed_since: float = 0.0  # ...from when (the first of them)
    refused: Refusal | None = None  # the shared buckets' last refusal...
    refused_at: float = 0.0  # ...when it was given
    recheck_at: float = 0.0  # refused locally until then, without asking again


def view(lease: Lease, limits: KeyLimits, now: float) -> float | None:
    """The most the key's shared token bucket can hold at ``now``, as far as this gateway knows (None: no limit)."""
    if limits.tokens_per_min is None or lease.tokens is None:
        return None
    return _charged(lease.tokens, limits.tokens_per_min, lease.owed, lease.owed_since, now).level


@dataclass(frozen=True, slots=True)
class Spent:
    """:func:`spend`'s decision: ``lease`` is the lease after it."""

    lease: Lease | None
    admitted: bool
    refusal: Refusal | None  # admitted False and refusal None: ask the shared buckets


def spend(lease: Lease | None, limits: KeyLimits, now: float) -> Spent:
    """Admit one request from the lease, refuse it on what this gateway knows, or say to ask the shared buckets."""
    if lease is None:
        return Spent(None, False, None)
    tokens = view(lease, limits, now)
    if tokens is not None and limits.tokens_per_min is not None and tokens <= 0:
        return Spent(lease, False, _token_refusal(tokens, limits.tokens_per_min))
    if lease.refused is not None and now < lease.recheck_at:
        waited = now - lease.refused_at
        return Spent(lease, False, replace(lease.refused, wait_s=max(0.0, lease.refused.wait_s - waited)))
    if now >= lease.until:
        return Spent(lease, False, None)
    if lease.left is None:
        return Spent(lease, True, None)
    if lease.left > 0:
        return Spent(replace(lease, left=lease.left - 1), True, None)
    return Spent(lease, False, None)


def renewed(lease: Lease | None, taken: Taken, charged: int, now: float, lease_s: float) -> Lease:
    """The lease after a compare-and-set that took ``taken`` and wrote ``charged`` of the tokens owed."""
    owed = (lease.owed if lease is not None else 0) - charged
    since = lease.owed_since if lease is not None else now
    tokens = taken.buckets.tokens
    if taken.refusal is not None:
        recheck = now + min(taken.recheck_s, lease_s)
        refused = taken.refusal
        return Lease(
            left=0,
            until=now,
            tokens=tokens,
            owed=owed,
            owed_since=since,
            refused=refused,
            refused_at=now,
            recheck_at=recheck,
        )
    return Lease(left=taken.granted, until=now + lease_s, tokens=tokens, owed=owed, owed_since=since)


def owing(lease: Lease, tokens: int, now: float) -> Lease:
    """The lease after a finished request charged ``tokens`` at ``now`` (written to the shared bucket later)."""
    return replace(lease, owed=lease.owed + tokens, owed_since=lease.owed_since if lease.owed > 0 else now)


def settled(lease: Lease, taken: Taken, charged: int) -> Lease:
    """The lease after a compare-and-set that only wrote ``charged`` of the tokens owed (it leased nothing)."""
    return replace(lease, tokens=taken.buckets.tokens, owed=lease.owed - charged)


def unspent(lease: Lease | None) -> int:
    """The requests a lapsed lease gives back."""
    return lease.left if lease is not None and lease.left is not None else 0
