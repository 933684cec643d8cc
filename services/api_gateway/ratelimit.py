"""Per-key rate limits: token buckets on requests per second and on tokens per minute. Pure; the clock is given.

- requests: a bucket of ``max(1, rps)`` requests refilled at ``rps`` per second (a second's
  burst); each admitted request takes one.
- tokens: a bucket of ``tokens_per_min`` tokens refilled at ``tokens_per_min / 60`` per second;
  a finished request is charged its prompt and completion tokens (the bucket may go below
  zero), and a key whose bucket is empty or overdrawn gets no new request until it refills.

A refusal says which limit and how long until a retry can succeed.
"""

from __future__ import annotations

import math
import time
from collections.abc import Callable
from dataclasses import dataclass
from typing import Literal

from nrt.core.state import ApiKey

Limit = Literal["requests per second", "tokens per minute"]


@dataclass
class Bucket:
    capacity: float
    rate: float  # refill per second
    level: float
    at: float  # when ``level`` was last brought up to date

    def refill(self, now: float) -> None:
        self.level = min(self.capacity, self.level + max(0.0, now - self.at) * self.rate)
        self.at = now


@dataclass(frozen=True, slots=True)
class Refusal:
    limit: Limit
    allowed: float  # the key's limit
    wait_s: float  # until a retry can succeed

    @property
    def retry_after(self) -> int:
        """``Retry-After`` in whole seconds, at least 1."""
        return max(1, math.ceil(self.wait_s))


class RateLimiter:
    """The buckets of every key that has limits, by key id."""

    def __init__(self, clock: Callable[[], float] = time.monotonic) -> None:
        self.clock = clock
        self._requests: dict[str, Bucket] = {}
        self._tokens: dict[str, Bucket] = {}

    def admit(self, key: ApiKey) -> Refusal | None:
        """Take one request from ``key``'s budget: None when it may go, else why not and for how long."""
        now = self.clock()
        if key.tokens_per_min is not None:
            tokens = self._bucket(self._tokens, key.key_id, key.tokens_per_min, key.tokens_per_min / 60.0, now)
            if tokens.level <= 0:
                wait = (1.0 - tokens.level) / tokens.rate  # until at least one token is back
                return Refusal("tokens per minute", key.tokens_per_min, wait)
        if key.rps is not None:
            requests = self._bucket(self._requests, key.key_id, max(1.0, key.rps), key.rps, now)
            if requests.level < 1.0:
                return Refusal("requests per second", key.rps, (1.0 - requests.level) / requests.rate)
            requests.level -= 1.0
        return None

    def charge(self, key_id: str | None, tokens: int) -> None:
        """Count ``tokens`` a finished request of ``key_id`` used (keys without a token limit: nothing)."""
        bucket = self._tokens.get(key_id) if key_id is not None else None
        if bucket is not None:
            bucket.refill(self.clock())
            bucket.level -= tokens

    @staticmethod
    def _bucket(buckets: dict[str, Bucket], key_id: str, capacity: float, rate: float, now: float) -> Bucket:
        bucket = buckets.get(key_id)
        if bucket is None:
            bucket = buckets[key_id] = Bucket(capacity=capacity, rate=rate, level=capacity, at=now)
        else:
            bucket.refill(now)
        return bucket
