"""The client side of ``bench.gateway``: concurrent callers, one ``httpx.AsyncClient`` per level.

Each request becomes a :class:`Sample`: what the client measured (the whole answer, or the
first content token of a streamed one) and what NRT's answer says about itself (the model
compute its workers report, the specialist's own time to its first chunk, the breakdown of
the request's time into transits and each service's own work).
"""

from __future__ import annotations

import asyncio
import dataclasses
import time
from collections import Counter
from collections.abc import Awaitable, Callable, Sequence

import httpx
import msgspec
import numpy as np

from api_gateway.openai_types import Breakdown, ChatCompletion, ChatCompletionChunk, NrtInfo

BENCH_API_KEY = "nrt-bench-gateway-infer-key"  # the stack under test records it at start (NRT_API_KEY)
JSON_HEADERS = {"Content-Type": "application/json", "Authorization": f"Bearer {BENCH_API_KEY}"}
REQUEST_TIMEOUT = 60.0

_completion = msgspec.json.Decoder(ChatCompletion)
_chunk = msgspec.json.Decoder(ChatCompletionChunk)
_json = msgspec.json.Encoder()


@dataclasses.dataclass(frozen=True)
class Sample:
    latency_ms: float  # the client's: the whole answer, or a streamed answer's first content token
    compute_ms: float = 0.0  # model compute the workers report (the router's classification + the specialist's)
    own_ttft_ms: float = 0.0  # streaming: the specialist's own time from the request to its first chunk
    router_compute_ms: float = 0.0  # the router's classification compute
    target: str = "echo"  # the model that answered
    breakdown: Breakdown | None = None


@dataclasses.dataclass
class Run:
    samples: list[Sample]
    wall_s: float

    def _q(self, values: Sequence[float], q: float) -> float:
        return float(np.percentile(values, q))

    def latency(self, q: float) -> float:
        return self._q([s.latency_ms for s in self.samples], q)

    def compute(self, q: float) -> float:
        return self._q([s.compute_ms for s in self.samples], q)

    def overhead(self, q: float) -> float:
        """Non-streaming: the latency minus the model compute, per request."""
        return self._q([s.latency_ms - s.compute_ms for s in self.samples], q)

    def first_token_overhead(self, q: float) -> float:
        """Streaming: the first content token at the client minus the specialist's own time to it, per request."""
        return self._q([s.latency_ms - s.own_ttft_ms for s in self.samples], q)

    def own_ttft(self, q: float) -> float:
        return self._q([s.own_ttft_ms for s in self.samples], q)

    def router_compute(self, q: float) -> float:
        return self._q([s.router_compute_ms for s in self.samples], q)

    def part(self, field: str, q: float = 50) -> float:
        """A part of the breakdown (``Breakdown``'s field) at quantile ``q``, over the requests that have it."""
        values = [v for s in self.samples if s.breakdown is not None and (v := getattr(s.breakdown, field)) is not None]
        return self._q(values, q) if values else float("nan")

    def http_ms(self, q: float = 50) -> float:
        """The client's latency beyond the gateway's own handling: HTTP in and out (uvicorn, Litestar, httpx)."""
        values = [s.latency_ms - s.breakdown.total_ms for s in self.samples if s.breakdown is not None]
        return self._q(values, q) if values else float("nan")

    @property
    def rate(self) -> float:
        return len(self.samples) / self.wall_s

    @property
    def targets(self) -> Counter[str]:
        return Counter(s.target for s in self.samples)


Check = Callable[[httpx.Response, float], Sample]  # a response and the client's latency -> its sample
OneRequest = Callable[[httpx.AsyncClient, str, bytes], Awaitable[Sample]]  # one request, answered


def check_floor(response: httpx.Response, latency_ms: float) -> Sample:
    if response.status_code != 200:
        raise RuntimeError(f"floor: HTTP {response.status_code}: {response.text[:500]}")
    if response.json().get("object") != "echo":
        raise RuntimeError(f"floor: not an echo: {response.text[:500]}")
    return Sample(latency_ms=latency_ms)


def _routed_info(info: NrtInfo | None, where: str) -> NrtInfo:
    if info is None or not info.routed or [hop.role for hop in info.hops] != ["router", "specialist"]:
        raise RuntimeError(f"nrt: not a routed answer ({where}): {info}")
    missing = [hop.role for hop in info.hops if hop.compute_ms is None]
    if missing:
        raise RuntimeError(f"nrt: no compute time reported for {', '.join(missing)}: {info}")
    return info


def check_routed(response: httpx.Response, latency_ms: float) -> Sample:
    """A routed completion: the model compute its workers report, and its breakdown."""
    if response.status_code != 200:
        raise RuntimeError(f"nrt: HTTP {response.status_code}: {response.text[:500]}")
    info = _routed_info(_completion.decode(response.content).nrt, "completion")
    router, specialist = info.hops
    return Sample(
        latency_ms=latency_ms,
        compute_ms=(router.compute_ms or 0.0) + (specialist.compute_ms or 0.0),
        router_compute_ms=router.compute_ms or 0.0,
        target=info.final_model,
        breakdown=info.breakdown,
    )


def posting(check: Check) -> OneRequest:
    """A non-streaming request: the whole answer's latency, checked by ``check``."""

    async def one(client: httpx.AsyncClient, path: str, body: bytes) -> Sample:
        started = time.perf_counter()
        response = await client.post(path, content=body, headers=JSON_HEADERS)
        return check(response, (time.perf_counter() - started) * 1e3)

    return one


async def stream_floor(client: httpx.AsyncClient, path: str, body: bytes) -> Sample:
    """The floor's streamed echo: the time to its first frame."""
    started = time.perf_counter()
    first: float | None = None
    async with client.stream("POST", path, content=body, headers=JSON_HEADERS) as response:
        if response.status_code != 200:
            raise RuntimeError(f"floor: HTTP {response.status_code}: {(await response.aread())[:500]!r}")
        async for line in response.aiter_lines():
            if first is None and line.startswith("data: ") and line != "data: [DONE]":
                first = (time.perf_counter() - started) * 1e3
    if first is None:
        raise RuntimeError("floor: the stream had no frame")
    return Sample(latency_ms=first)


async def stream_routed(client: httpx.AsyncClient, path: str, body: bytes) -> Sample:
    """A streamed routed answer: the time to its first content token, and what the answer reports."""
    started = time.perf_counter()
    first: float | None = None
    info: NrtInfo | None = None
    async with client.stream("POST", path, content=body, headers=JSON_HEADERS) as response:
        if response.status_code != 200:
            raise RuntimeError(f"nrt: HTTP {response.status_code}: {(await response.aread())[:500]!r}")
        async for line in response.aiter_lines():
            if not line.startswith("data: ") or line == "data: [DONE]":
                continue
            chunk = _chunk.decode(line.removeprefix("data: "))
            if first is None and any(choice.delta.content for choice in chunk.choices):
                first = (time.perf_counter() - started) * 1e3
            info = chunk.nrt or info
    routed = _routed_info(info, "stream")
    if first is None:
        raise RuntimeError("nrt: the stream had no content")
    router, specialist = routed.hops
    return Sample(
        latency_ms=first,
        own_ttft_ms=specialist.own_ttft_ms or 0.0,
        router_compute_ms=router.compute_ms or 0.0,
        target=routed.final_model,
        breakdown=routed.breakdown,
    )


async def drive(
    client: httpx.AsyncClient,
    path: str,
    bodies: Sequence[bytes],
    concurrency: int,
    one: OneRequest,
) -> Run:
    """``len(bodies)`` requests from ``concurrency`` concurrent callers, each waiting for its answer."""
    samples: list[Sample] = []
    pending = iter(bodies)

    async def caller() -> None:
        for body in pending:
            samples.append(await one(client, path, body))

    started = time.perf_counter()
    await asyncio.gather(*(caller() for _ in range(concurrency)))
    return Run(samples, time.perf_counter() - started)


async def measure(
    base_url: str,
    path: str,
    bodies: Sequence[bytes],
    warmup: Sequence[bytes],
    concurrency: int,
    one: OneRequest,
) -> Run:
    limits = httpx.Limits(max_connections=concurrency, max_keepalive_connections=concurrency)
    async with httpx.AsyncClient(base_url=base_url, timeout=REQUEST_TIMEOUT, limits=limits) as client:
        await drive(client, path, warmup, concurrency, one)
        return await drive(client, path, bodies, concurrency, one)


def request_bodies(prompts: Sequence[str], n: int, max_tokens: int, stream: bool = False) -> list[bytes]:
    return [
        _json.encode(
            {
                "model": "router",
                "messages": [{"role": "user", "content": prompts[i % len(prompts)]}],
                "max_tokens": max_tokens,
                "temperature": 0.0,
                "stream": stream,
            }
        )
        for i in range(n)
    ]
