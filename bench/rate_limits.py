"""Rate-limit benchmark: what a limited key's admission costs a gateway, leased vs. a compare-and-set per request.

On a real NATS server (embedded, or NRT_NATS_URL's), a fresh JetStream KV bucket as the gateway makes
``NRT_RATE_LIMITS``, and ``api_gateway.shared_limits.SharedRateLimiter`` as the gateway runs it:

1. floor: one compare-and-set round on the bucket (read, then write at that revision), measured alone;
2. per request: a key whose lease is one request (``batch`` 1), so each admission is a compare-and-set;
3. leased: the gateway's default lease (``NRT_GATEWAY_RATE_LEASE_SHARE`` of the burst), so most admissions
   are decided in the process;
4. the same two with two gateways (two connections, two limiters) on one key at once: the conflicts.

The key's limit is far above what the run sends: nothing is refused, the cost is the limiter's alone. Each
figure is the p50 of one admission and the compare-and-set attempts per admission, against the floor.

    python -m bench.rate_limits [--requests 2000] [--concurrency 16]
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import statistics
import tempfile
import time
import uuid
from collections.abc import AsyncIterator
from datetime import UTC, datetime

import nats
from nats.js.errors import NotFoundError

from api_gateway.settings import GatewaySettings
from api_gateway.shared_limits import LeaseTerms, SharedRateLimiter
from bench.common import report
from nrt.adapters.bus.jetstream import ensure_kv_bucket
from nrt.adapters.bus.kv import JetStreamCas
from nrt.core.state import ApiKey
from nrt.core.vocabulary import KeyScope
from nrt.testing.servers import nats_server

RPS = 1_000_000.0  # far above the run: nothing is refused
ONE_BY_ONE = 1e-9  # a share that makes every lease one request


def _key() -> ApiKey:
    return ApiKey(
        key_id=uuid.uuid4().hex[:12],
        name="bench",
        scope=KeyScope.INFER,
        key_sha256="0" * 64,
        rps=RPS,
        created_at=datetime.now(UTC),
    )


@contextlib.asynccontextmanager
async def bucket(nats_url: str) -> AsyncIterator[str]:
    """A fresh KV bucket's name, deleted afterwards."""
    nc = await nats.connect(nats_url)
    name = f"NRT_BENCH_LIMITS_{uuid.uuid4().hex[:8]}"
    js = nc.jetstream()
    try:
        await ensure_kv_bucket(js, name, "bench.rate_limits")
        yield name
    finally:
        with contextlib.suppress(NotFoundError):
            await js.delete_key_value(name)
        await nc.close()


async def floor_us(cas: JetStreamCas, n: int) -> float:
    """p50 of one compare-and-set round (read, write at its revision), microseconds."""
    key = uuid.uuid4().hex[:12]
    await cas.write(key, b"0", None)
    samples = []
    for _ in range(n):
        started = time.perf_counter()
        current = await cas.read(key)
        assert current is not None
        await cas.write(key, b"1", current.revision)
        samples.append((time.perf_counter() - started) * 1e6)
    return statistics.median(samples)


async def drive(limiters: list[SharedRateLimiter], key: ApiKey, n: int, concurrency: int) -> tuple[float, float]:
    """``n`` admissions per limiter from ``concurrency`` callers each: (p50 microseconds, CAS attempts each)."""
    samples: list[float] = []
    before = sum(limiter.asked for limiter in limiters)

    async def caller(limiter: SharedRateLimiter, count: int) -> None:
        for _ in range(count):
            started = time.perf_counter()
            refusal = await limiter.admit(key)
            samples.append((time.perf_counter() - started) * 1e6)
            assert refusal is None, refusal

    per = n // concurrency
    await asyncio.gather(*(caller(limiter, per) for limiter in limiters for _ in range(concurrency)))
    asked = sum(limiter.asked for limiter in limiters) - before
    return statistics.median(samples), asked / len(samples)


async def main(nats_url: str, n: int, concurrency: int) -> None:
    share = GatewaySettings.model_fields["rate_lease_share"].default
    lease_s = GatewaySettings.model_fields["rate_lease_s"].default
    print(
        f"rate-limit benchmark: {n} admissions per gateway of a {RPS:g} rps key (never refused), "
        f"at concurrency 1 and {concurrency}; leased: share {share} of the burst for {lease_s} s",
        flush=True,
    )
    async with bucket(nats_url) as name:
        connections = [await nats.connect(nats_url) for _ in range(2)]
        try:
            stores = [JetStreamCas(await ensure_kv_bucket(c.jetstream(), name, "")) for c in connections]
            floor = await floor_us(stores[0], min(n, 500))
            report("floor: one compare-and-set round p50", floor, "us", precision=1)
            for c in (1, concurrency):
                for label, terms in (
                    ("per request", LeaseTerms(share=ONE_BY_ONE, lease_s=lease_s)),
                    ("leased", LeaseTerms(share=share, lease_s=lease_s)),
                ):
                    for gateways in (1, 2):
                        limiters = [SharedRateLimiter(store, terms) for store in stores[:gateways]]
                        p50, asked = await drive(limiters, _key(), n, c)
                        name = f"{label} c={c}, {gateways} gateway{'s' if gateways > 1 else ''}"
                        report(f"{name}: admission p50", p50, "us", p50 / floor, "floor", precision=1)
                        report(f"{name}: CAS attempts per admission", asked, "", precision=3)
        finally:
            for connection in connections:
                await connection.close()


if __name__ == "__main__":
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--requests", type=int, default=2000, help="admissions per gateway and run")
    parser.add_argument("--concurrency", type=int, default=16)
    args = parser.parse_args()
    with (
        tempfile.TemporaryDirectory(prefix="nrt-bench-limits-") as tmp,
        nats_server(tmp, env_var="NRT_NATS_URL", use_docker=False) as url,
    ):
        asyncio.run(main(url, args.requests, args.concurrency))
